"""The schema registry: Confluent Schema Registry's rules over the state the ``_schemas``
topic gives (chronik.registry.state), written through one primary.

Reads are answered from this broker's state, kept current by reading its copy of the
topic up to the high watermark (what every in-sync replica has). Writes (register,
delete, config, mode) are made by the primary only, the leader of ``_schemas``
partition 0; the HTTP layer forwards them there. A write is decided under one lock
against a state that has read the whole log (a new primary first waits until its log
is committed and reads it, so an id handed out by the old primary is never handed out
again), appended through the partition writer, and applied once every in-sync replica
has it; only then is it answered.

The rules, as Confluent's: one global id per schema (type, canonical text, references)
across subjects, ids only grow; a schema registered again under a subject answers its
existing id; versions count up per subject and are not reused after a soft delete; a
permanent delete needs a soft delete first; a version other schemas reference cannot
be deleted; compatibility is checked against live versions at the subject's level
(chronik.schemas.compatibility); READONLY refuses writes, IMPORT takes ids the client
chooses and skips compatibility.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from chronik.registry import errors
from chronik.registry import topic_format as fmt
from chronik.registry.state import MODES, RegistryState, StoredSchema, SubjectVersion
from chronik.registry.topic_format import Reference, SchemaValue
from chronik.schemas.compatibility import LEVELS, incompatibilities
from chronik.schemas.formats import parse
from chronik.schemas.types import SCHEMA_TYPES, ParsedSchema, SchemaError

log = logging.getLogger("chronik.registry")

MAX_VERSION = 2**31 - 1
MAX_SUBJECT_BYTES = 1024
MAX_REFERENCE_DEPTH = 32
PARSED_CACHE = 1024

DEFAULTS = {
    "schema.registry.max.schemas": "100000",
    "schema.registry.max.schema.bytes": str(1024 * 1024),
    "schema.registry.timeout.ms": "30000",
}

Record = tuple[bytes, bytes | None]


class SchemaLog(Protocol):
    """The ``_schemas`` partition as the registry uses it (chronik.registry.schemas_topic)."""

    current_log: object

    def is_primary(self) -> bool: ...

    async def ensure(self, timeout: float) -> None:
        """The topic exists and has a leader (created on first use)."""
        ...

    async def committed_end(self, timeout: float) -> int:
        """On the primary: wait until everything in its log is committed; its end."""
        ...

    def readable_end(self) -> int:
        """How far this broker may read (its high watermark); 0 without a local copy."""
        ...

    def local_end(self) -> int:
        """The end of this broker's copy, committed or not; 0 without one."""
        ...

    async def read(
        self, offset: int, end: int
    ) -> tuple[list[tuple[bytes | None, bytes | None, int]], int]:
        """(key, value, offset) of the records in [offset, end), and the offset the read
        reached (past offsets without a record: compacted away, control batches)."""
        ...

    async def append(self, records: list[Record], timeout: float) -> int:
        """Append as the primary, durable on every in-sync replica; the last offset."""
        ...


@dataclass
class Registered:
    subject: str
    version: int
    schema: StoredSchema

    def to_json(self) -> dict[str, Any]:
        return {"subject": self.subject, "version": self.version, **schema_json(self.schema)}


def schema_json(stored: StoredSchema) -> dict[str, Any]:
    """The fields of a schema in Confluent's answers: id, schemaType (absent for Avro),
    references (absent when none), schema."""
    out: dict[str, Any] = {"id": stored.schema_id}
    if stored.schema_type != "AVRO":
        out["schemaType"] = stored.schema_type
    if stored.references:
        out["references"] = [r.to_json() for r in stored.references]
    out["schema"] = stored.text
    return out


def parse_version(text: str | int, *, allow_latest: bool = True) -> int:
    """A version in a path: 1..2^31-1, or ``latest`` / -1 (returned as -1)."""
    if allow_latest and str(text).lower() in ("latest", "-1"):
        return -1
    try:
        number = int(str(text), 10)
    except ValueError:
        raise errors.invalid_version(text) from None
    if not 1 <= number <= MAX_VERSION:
        raise errors.invalid_version(text)
    return number


def check_subject(subject: str) -> str:
    if (
        not subject
        or len(subject.encode()) > MAX_SUBJECT_BYTES
        or any(ord(c) < 32 for c in subject)
    ):
        raise errors.invalid_subject(subject)
    return subject


class SchemaRegistry:
    def __init__(self, schema_log: SchemaLog, config: Mapping[str, str]) -> None:
        self.log = schema_log
        values = {**DEFAULTS, **config}
        self.max_schemas = int(values["schema.registry.max.schemas"])
        self.max_schema_bytes = int(values["schema.registry.max.schema.bytes"])
        self.timeout = int(values["schema.registry.timeout.ms"]) / 1000
        self.state = RegistryState()
        self._write_lock = asyncio.Lock()
        self._read_lock = asyncio.Lock()
        self._parsed: OrderedDict[int, ParsedSchema] = OrderedDict()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.forwarded_writes = 0
        self.on_change: Callable[[], None] | None = None

    # -- following the topic ------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.create_task(self._follow())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def wake(self) -> None:
        """The topic's log grew here (an append, a replica fetch): read it soon."""
        self._wake.set()

    def log_grew(self, partition_log: object) -> None:
        """A log grew or its high watermark moved; the registry reads on if it is its own."""
        if partition_log is self.log.current_log and partition_log is not None:
            self._wake.set()

    async def _follow(self) -> None:
        while True:
            try:
                await self.catch_up()
            except Exception:
                log.exception("schema registry: reading _schemas failed")
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), 0.5)

    async def catch_up_committed(self, timeout: float = 2.0) -> None:
        """Read on as far as this copy holds now, once it is committed: a record the
        primary had acknowledged is in every in-sync copy, but a follower learns that it
        is committed only with its next fetch. Bounded by ``timeout``; then reads what
        is committed."""
        target = self.log.local_end()
        deadline = time.monotonic() + timeout
        while self.log.readable_end() < target and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        await self.catch_up()

    async def catch_up(self, end: int | None = None) -> None:
        """Apply the records this broker may read (up to ``end`` if given)."""
        limit = self.log.readable_end() if end is None else end
        if self.state.next_offset >= limit:
            return
        async with self._read_lock:
            before = self.state.next_offset
            while self.state.next_offset < limit:
                start = self.state.next_offset
                records, reached = await self.log.read(start, limit)
                for key, value, offset in records:
                    if offset >= self.state.next_offset:
                        self.state.apply(key, value, offset)
                self.state.next_offset = max(self.state.next_offset, reached)
                if self.state.next_offset <= start:
                    break
            if self.on_change is not None and self.state.next_offset != before:
                self.on_change()

    # -- parsing --------------------------------------------------------------------------
    def resolve_references(
        self, references: tuple[Reference, ...], depth: int = 0
    ) -> dict[str, str]:
        """Name -> schema text of every reference, theirs included (transitively)."""
        if depth > MAX_REFERENCE_DEPTH:
            raise errors.invalid_schema("references nest too deep")
        out: dict[str, str] = {}
        for ref in references:
            entry = self.state.subjects.get(ref.subject, {}).get(ref.version)
            stored = self.state.schemas.get(entry.schema_id) if entry is not None else None
            if stored is None:
                raise errors.invalid_schema(
                    f"reference {ref.name!r} to subject {ref.subject!r} version {ref.version} "
                    "does not exist"
                )
            out.update(self.resolve_references(stored.references, depth + 1))
            out[ref.name] = stored.text
        return out

    def parse(self, schema_type: str, text: str, references: tuple[Reference, ...]) -> ParsedSchema:
        if schema_type not in SCHEMA_TYPES:
            raise errors.invalid_schema(f"of unknown type {schema_type!r}")
        if len(text.encode()) > self.max_schema_bytes:
            raise errors.invalid_schema(
                f"of {len(text.encode())} bytes: over schema.registry.max.schema.bytes "
                f"({self.max_schema_bytes})"
            )
        resolved = self.resolve_references(references)
        try:
            return parse(schema_type, text, resolved)
        except SchemaError as exc:
            raise errors.invalid_schema(f"{str(exc)[:2000]}") from None
        except RecursionError:
            raise errors.invalid_schema("nests too deep") from None

    def parsed(self, stored: StoredSchema) -> ParsedSchema:
        cached = self._parsed.get(stored.schema_id)
        if cached is not None:
            self._parsed.move_to_end(stored.schema_id)
            return cached
        result = self.parse(stored.schema_type, stored.text, stored.references)
        self._parsed[stored.schema_id] = result
        if len(self._parsed) > PARSED_CACHE:
            self._parsed.popitem(last=False)
        return result

    def _prepare(
        self,
        subject: str | None,
        schema_type: str,
        text: str,
        references: tuple[Reference, ...],
        normalize: bool,
    ) -> tuple[ParsedSchema, str]:
        parsed = self.parse(schema_type, text, references)
        if normalize or self.state.normalize(subject):
            try:
                parsed = parsed.normalized()
            except SchemaError as exc:
                raise errors.invalid_schema(str(exc)) from None
        return parsed, parsed.canonical()

    # -- reads ------------------------------------------------------------------------------
    def schema_by_id(self, schema_id: int) -> StoredSchema:
        stored = self.state.schemas.get(schema_id)
        if stored is None:
            raise errors.schema_not_found(f"Schema {schema_id} not found")
        return stored

    def subjects_of(self, schema_id: int, deleted: bool) -> list[tuple[str, int]]:
        stored = self.schema_by_id(schema_id)
        out = []
        for subject, version in sorted(stored.users):
            entry = self.state.subjects.get(subject, {}).get(version)
            if entry is not None and (deleted or not entry.deleted):
                out.append((subject, version))
        return out

    def versions(self, subject: str, deleted: bool, deleted_only: bool = False) -> list[int]:
        entries = self.state.versions(subject, deleted=True)
        if not entries or (not deleted and not deleted_only and all(e.deleted for e in entries)):
            raise errors.subject_not_found(subject)
        if deleted_only:
            return [e.version for e in entries if e.deleted]
        return [e.version for e in entries if deleted or not e.deleted]

    def version(self, subject: str, spec: str | int, deleted: bool = False) -> Registered:
        number = parse_version(spec)
        entries = self.state.versions(subject, deleted=True)
        live = [e for e in entries if not e.deleted]
        if not entries or (not live and not deleted):
            raise errors.subject_not_found(subject)
        if number == -1:
            pool = entries if deleted else live
            if not pool:
                raise errors.version_not_found(spec)
            entry = pool[-1]
        else:
            found = self.state.subjects.get(subject, {}).get(number)
            if found is None or (found.deleted and not deleted):
                raise errors.version_not_found(number)
            entry = found
        return Registered(subject, entry.version, self.schema_by_id(entry.schema_id))

    def lookup(
        self,
        subject: str,
        schema_type: str,
        text: str,
        references: tuple[Reference, ...],
        normalize: bool,
        deleted: bool,
    ) -> Registered:
        entries = self.state.versions(subject, deleted=True)
        if not entries or (not deleted and all(e.deleted for e in entries)):
            raise errors.subject_not_found(subject)
        _, canonical = self._prepare(subject, schema_type, text, references, normalize)
        identity = (schema_type, canonical, references)
        found = self._latest_with([e for e in entries if deleted or not e.deleted], identity)
        if found is None:
            raise errors.schema_not_found()
        return Registered(subject, found[0].version, found[1])

    def _latest_with(
        self, entries: list[SubjectVersion], identity: tuple[str, str, tuple[Reference, ...]]
    ) -> tuple[SubjectVersion, StoredSchema] | None:
        """The latest of ``entries`` whose schema is ``identity``, with that schema."""
        for entry in reversed(entries):
            stored = self.state.schemas.get(entry.schema_id)
            if stored is not None and stored.identity == identity:
                return entry, stored
        return None

    def list_schemas(self, prefix: str, deleted: bool, latest_only: bool) -> list[Registered]:
        out = []
        for subject in self.state.subject_names(deleted=deleted):
            if not subject.startswith(prefix):
                continue
            entries = self.state.versions(subject, deleted=deleted)
            if latest_only:
                entries = entries[-1:]
            for entry in entries:
                out.append(Registered(subject, entry.version, self.schema_by_id(entry.schema_id)))
        return out

    def check(
        self,
        subject: str,
        spec: str | int | None,
        schema_type: str,
        text: str,
        references: tuple[Reference, ...],
        normalize: bool,
    ) -> list[str]:
        """What breaks between the schema and a subject's versions: one version
        (``spec``) at the subject's level, or (``spec`` None) every version the level
        checks. Empty when compatible."""
        new, _ = self._prepare(subject, schema_type, text, references, normalize)
        level = self.state.compatibility(subject)
        if spec is None:
            olds = self.state.versions(subject)
        else:
            olds = [self._entry(subject, self.version(subject, spec).version)]
            if level.endswith("_TRANSITIVE"):
                level = level.removesuffix("_TRANSITIVE")
        return self._incompatibilities(level, new, schema_type, olds)

    def _entry(self, subject: str, version: int) -> SubjectVersion:
        return self.state.subjects[subject][version]

    def _incompatibilities(
        self, level: str, new: ParsedSchema, schema_type: str, olds: list[SubjectVersion]
    ) -> list[str]:
        pairs = []
        for entry in olds:
            stored = self.schema_by_id(entry.schema_id)
            if stored.schema_type != schema_type:
                if level != "NONE":
                    return [
                        f"{{errorType:'TYPE_MISMATCH', description:'The new schema is of type "
                        f"{schema_type} and the old one (version {entry.version}) of type "
                        f"{stored.schema_type}', additionalInfo:''}}"
                    ]
                continue
            pairs.append((entry.version, self.parsed(stored)))
        return incompatibilities(level, new, pairs)

    def config(self, subject: str | None, default_to_global: bool) -> dict[str, Any]:
        own = self.state.configs.get(subject)
        if own is None:
            if subject is not None and not default_to_global:
                raise errors.subject_config_not_found(subject)
            level = self.state.compatibility(subject)
            normalize = self.state.normalize(subject)
        else:
            level, normalize = own.compatibility, bool(own.normalize)
        out: dict[str, Any] = {"compatibilityLevel": level}
        if normalize:
            out["normalize"] = True
        return out

    def mode(self, subject: str | None, default_to_global: bool) -> str:
        if subject is not None and subject not in self.state.modes and not default_to_global:
            raise errors.subject_mode_not_found(subject)
        return self.state.mode(subject)

    # -- writes (the primary only) -----------------------------------------------------------
    async def _write(self, decide: Callable[[], tuple[list[Record], Any]]) -> Any:
        """Under the write lock, on a state that has read the committed log: ``decide``
        what to append (raising a RegistryError to refuse), append it durably, apply it,
        and return what ``decide`` said to answer."""
        async with self._write_lock:
            try:
                await self.log.ensure(self.timeout)
                end = await self.log.committed_end(self.timeout)
            except TimeoutError:
                raise errors.timed_out("the _schemas topic is not ready") from None
            await self.catch_up(end)
            records, answer = decide()
            if records:
                try:
                    last = await self.log.append(records, self.timeout)
                except errors.RegistryError:
                    raise
                except TimeoutError:
                    raise errors.timed_out("the write was not replicated in time") from None
                except Exception as exc:
                    log.warning("schema registry: write failed: %s", exc)
                    raise errors.store_error(str(exc) or type(exc).__name__) from None
                await self.catch_up(last + 1)
            return answer

    def _writable(self, subject: str | None) -> str:
        mode = self.state.mode(subject)
        if mode in ("READONLY", "READONLY_OVERRIDE"):
            raise errors.not_permitted(
                f"Subject {subject} is in read-only mode"
                if subject
                else "Registry is in read-only mode"
            )
        return mode

    async def register(
        self,
        subject: str,
        schema_type: str,
        text: str,
        references: tuple[Reference, ...],
        normalize: bool,
        schema_id: int | None = None,
        version: int | None = None,
    ) -> tuple[int, int]:
        """(id, version) of the schema under ``subject``, registered if it was not."""
        check_subject(subject)

        def decide() -> tuple[list[Record], tuple[int, int]]:
            mode = self._writable(subject)
            new, canonical = self._prepare(subject, schema_type, text, references, normalize)
            identity = (schema_type, canonical, references)
            entries = self.state.versions(subject, deleted=True)
            live = [e for e in entries if not e.deleted]
            if schema_id is None or mode != "IMPORT":
                found = self._latest_with(live, identity)
                if found is not None and schema_id in (None, found[1].schema_id):
                    return [], (found[1].schema_id, found[0].version)
            existing = self.state.ids.get(identity)
            if mode == "IMPORT":
                if schema_id is None:
                    raise errors.not_permitted(
                        "In IMPORT mode a schema is registered with the id it had: give 'id'"
                    )
                taken = self.state.schemas.get(schema_id)
                if taken is not None and taken.identity != identity:
                    raise errors.not_permitted(
                        f"Overwrite new schema with id {schema_id} is not permitted."
                    )
                new_id = schema_id
            else:
                if schema_id is not None and existing != schema_id:
                    raise errors.not_permitted(
                        f"Overwrite new schema with id {schema_id} is not permitted."
                        " Ids are chosen by a client in IMPORT mode only."
                    )
                if version is not None and version != (
                    max((e.version for e in entries), default=0) + 1
                ):
                    raise errors.not_permitted(
                        f"Version {version} is not the next version of subject {subject}."
                    )
                level = self.state.compatibility(subject)
                problems = self._incompatibilities(level, new, schema_type, live)
                if problems:
                    raise errors.incompatible(subject, problems)
                new_id = existing if existing is not None else self.state.max_id + 1
            if new_id not in self.state.schemas and self.state.schema_count() >= self.max_schemas:
                raise errors.not_permitted(
                    f"The registry holds {self.state.schema_count()} schemas, "
                    f"schema.registry.max.schemas: no more are taken"
                )
            number = (
                version
                if version is not None
                else (max((e.version for e in entries), default=0) + 1)
            )
            if number in self.state.subjects.get(subject, {}):
                raise errors.not_permitted(f"Version {number} of subject {subject} exists.")
            value = SchemaValue(subject, number, new_id, schema_type, canonical, references)
            return [(fmt.schema_key(subject, number), fmt.schema_value(value))], (new_id, number)

        result: tuple[int, int] = await self._write(decide)
        return result

    async def delete_version(self, subject: str, spec: str | int, permanent: bool) -> int:
        def decide() -> tuple[list[Record], int]:
            self._writable(subject)
            number = parse_version(spec)
            entries = self.state.versions(subject, deleted=True)
            if not entries:
                raise errors.subject_not_found(subject)
            if number == -1:
                live = [e for e in entries if not e.deleted]
                pool = entries if permanent else live
                if not pool:
                    raise errors.version_not_found(spec)
                entry = pool[-1]
            else:
                found = self.state.subjects[subject].get(number)
                if found is None:
                    raise errors.version_not_found(number)
                entry = found
            if self.state.referenced_by(subject, entry.version):
                raise errors.reference_exists(subject, entry.version)
            key = fmt.schema_key(subject, entry.version)
            if permanent:
                if not entry.deleted:
                    raise errors.version_not_soft_deleted(subject, entry.version)
                return [(key, None)], entry.version
            if entry.deleted:
                raise errors.version_soft_deleted(subject, entry.version)
            stored = self.schema_by_id(entry.schema_id)
            value = SchemaValue(
                subject,
                entry.version,
                stored.schema_id,
                stored.schema_type,
                stored.text,
                stored.references,
                deleted=True,
            )
            return [(key, fmt.schema_value(value))], entry.version

        result: int = await self._write(decide)
        return result

    async def delete_subject(self, subject: str, permanent: bool) -> list[int]:
        def decide() -> tuple[list[Record], list[int]]:
            self._writable(subject)
            entries = self.state.versions(subject, deleted=True)
            if not entries:
                raise errors.subject_not_found(subject)
            live = [e for e in entries if not e.deleted]
            for entry in entries:
                if self.state.referenced_by(subject, entry.version):
                    raise errors.reference_exists(subject, entry.version)
            if permanent:
                if live:
                    raise errors.subject_not_soft_deleted(subject)
                records: list[Record] = [
                    (fmt.schema_key(subject, e.version), None) for e in entries
                ]
                if subject in self.state.configs:
                    records.append((fmt.config_key(subject), None))
                if subject in self.state.modes:
                    records.append((fmt.mode_key(subject), None))
                return records, [e.version for e in entries]
            if not live:
                raise errors.subject_soft_deleted(subject)
            latest = entries[-1].version
            return (
                [(fmt.delete_subject_key(subject), fmt.delete_subject_value(subject, latest))],
                [e.version for e in live],
            )

        result: list[int] = await self._write(decide)
        return result

    async def set_config(
        self, subject: str | None, level: str | None, normalize: bool | None
    ) -> dict[str, Any]:
        if subject is not None:
            check_subject(subject)
        if level is None or not isinstance(level, str) or level.upper() not in LEVELS:
            raise errors.invalid_compatibility(level)
        level = level.upper()

        def decide() -> tuple[list[Record], dict[str, Any]]:
            answer: dict[str, Any] = {"compatibility": level}
            if normalize is not None:
                answer["normalize"] = normalize
            return [(fmt.config_key(subject), fmt.config_value(level, normalize))], answer

        result: dict[str, Any] = await self._write(decide)
        return result

    async def delete_config(self, subject: str | None) -> dict[str, Any]:
        def decide() -> tuple[list[Record], dict[str, Any]]:
            if subject is not None and subject not in self.state.configs:
                if not self.state.subjects.get(subject):
                    raise errors.subject_not_found(subject)
                raise errors.subject_config_not_found(subject)
            before = self.config(subject, default_to_global=True)
            return [(fmt.config_key(subject), None)], before

        result: dict[str, Any] = await self._write(decide)
        return result

    async def set_mode(self, subject: str | None, mode: str | None, force: bool) -> str:
        if subject is not None:
            check_subject(subject)
        if not isinstance(mode, str) or mode.upper() not in MODES:
            raise errors.invalid_mode(mode)
        wanted = mode.upper()

        def decide() -> tuple[list[Record], str]:
            if wanted == "IMPORT" and not force:
                live = (
                    self.state.versions(subject)
                    if subject is not None
                    else self.state.subject_names()
                )
                if live:
                    raise errors.not_permitted(
                        "Cannot import since found existing subjects"
                        if subject is None
                        else f"Cannot import since subject {subject} has versions"
                    )
            return [(fmt.mode_key(subject), fmt.mode_value(wanted))], wanted

        result: str = await self._write(decide)
        return result

    async def delete_mode(self, subject: str) -> str:
        def decide() -> tuple[list[Record], str]:
            if subject not in self.state.modes:
                raise errors.subject_mode_not_found(subject)
            before = self.state.modes[subject]
            return [(fmt.mode_key(subject), None)], before

        result: str = await self._write(decide)
        return result
