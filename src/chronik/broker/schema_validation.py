"""Broker-side schema validation (Confluent Server's ``confluent.key.schema.validation`` /
``confluent.value.schema.validation`` topic configs): on a topic that opts in, every
record's key or value must start with Confluent's header (chronik.schemas.framing) naming a
schema id this broker's registry knows, registered (a live or soft-deleted version, not
a hard-deleted one) under the subject the topic's subject name strategy gives
(chronik.schemas.subject_names). A null key or value (a tombstone) passes. A batch with
any record that does not is refused whole, INVALID_RECORD with each bad record named in
``record_errors``.

The registry read is this broker's own copy of ``_schemas``: an id registered a moment
ago on the primary may not have reached it, so a refusal that depends on the registry
lets it catch up once and looks again.

Cost: the produce handler calls in only for a topic whose config opts in. Per batch the
records are walked once (chronik.records.heads, compiled with mypyc: tens of nanoseconds
a record), reading the first five bytes of each key or value as an int and answering runs
of equal ones; the distinct heads of a batch (usually one) are looked up in a small cache
of verdicts, emptied whenever the registry's state moves. Only a batch with a bad record,
or a Protobuf schema under a record name strategy (whose message indexes differ per
record), costs a pass per record in Python.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, NamedTuple

from chronik.protocol import errors
from chronik.records import compiled, heads
from chronik.records.batch import BatchHeader, InvalidBatch
from chronik.registry.errors import RegistryError
from chronik.schemas import framing, subject_names
from chronik.schemas.types import SchemaError

if TYPE_CHECKING:
    from chronik.registry.registry import SchemaRegistry
    from chronik.registry.state import StoredSchema
    from chronik.storage.config import LogConfig

log = logging.getLogger("chronik.schema_validation")

# The compiled walk over the records, unless it is older than its source.
_heads = compiled.current(heads)
# Verdicts kept between batches; the cache is emptied when full (and on every change of
# the registry's state), so it holds the headers in use.
MAX_VERDICTS = 4096


class Refusal(NamedTuple):
    reason: str
    # The registry's state decided it (an unknown id, an id under another subject): a
    # copy of _schemas that has caught up may decide otherwise.
    from_registry: bool


class _PerRecord:
    """The verdict of a Protobuf schema under a record name strategy: the subject depends
    on each record's message indexes."""


PER_RECORD = _PerRecord()
Verdict = Refusal | _PerRecord | None
_MISSING = object()


class SchemaValidator:
    def __init__(self) -> None:
        self.registry: SchemaRegistry | None = None
        # (topic, is key, strategy as configured, head code or header bytes) -> verdict
        self._verdicts: dict[tuple[str, bool, str, int | bytes], Verdict] = {}
        self._seen_offset = -1

    def attach(self, registry: SchemaRegistry) -> None:
        self.registry = registry
        registry.on_change = self._changed

    def _changed(self) -> None:
        """After each catch-up of the registry: forget the verdicts if its state moved."""
        assert self.registry is not None
        offset = self.registry.state.next_offset
        if offset != self._seen_offset:
            self._seen_offset = offset
            self._verdicts.clear()

    async def check(
        self,
        batch: bytes | bytearray | memoryview,
        header: BatchHeader,
        topic: str,
        partition: int,
        config: LogConfig,
    ) -> None:
        """Raise InvalidBatch unless every record of the batch passes. Given bytes (the
        request's, as kio decodes them) the walk reads them in place; anything else is
        copied once (the compiled walk reads bytes only)."""
        registry = self.registry
        if registry is None:
            which = [
                name
                for name, on in (
                    ("confluent.key.schema.validation", config.key_schema_validation),
                    ("confluent.value.schema.validation", config.value_schema_validation),
                )
                if on
            ]
            raise InvalidBatch(
                errors.INVALID_RECORD,
                f"Topic {topic} has {' and '.join(which)}=true but this broker serves no "
                "schema registry to validate against: schema.registry.listen is needed",
            )
        count = header.records_count
        try:
            data = batch if isinstance(batch, bytes) else bytes(batch)
            section = _heads.records_section(data, header.size, header.compression)
            fields = []
            if config.key_schema_validation:
                runs = _heads.head_runs(*section, count, True)
                fields.append((True, config.key_subject_name_strategy, runs))
            if config.value_schema_validation:
                runs = _heads.head_runs(*section, count, False)
                fields.append((False, config.value_subject_name_strategy, runs))
        except Exception as exc:  # malformed records, or a codec that fails on them
            raise InvalidBatch(errors.CORRUPT_MESSAGE, f"malformed records: {exc}") from None
        problems, from_registry = self._problems(registry, topic, section, count, fields)
        if problems and from_registry:
            try:
                await registry.catch_up_committed()
            except Exception as exc:  # reading _schemas failed: decide on what was read
                log.warning("schema validation: catching up with _schemas failed: %s", exc)
            else:
                problems, _ = self._problems(registry, topic, section, count, fields)
        if not problems:
            return
        record_errors = tuple(sorted(problems.items()))
        raise InvalidBatch(
            errors.INVALID_RECORD,
            f"One or more records have been rejected due to {len(record_errors)} record errors"
            f" in total, and only showing the first three errors at most:"
            f" {list(record_errors[:3])}",
            record_errors,
        )

    def _problems(
        self,
        registry: SchemaRegistry,
        topic: str,
        section: tuple[bytes, int, int],
        count: int,
        fields: list[tuple[bool, str, list[int]]],
    ) -> tuple[dict[int, str], bool]:
        """(index in the batch -> why, whether any refusal came from the registry)."""
        problems: dict[int, str] = {}
        from_registry = False
        verdicts = self._verdicts
        for is_key, strategy, runs in fields:
            bad: dict[int, Refusal | _PerRecord] = {}
            for code in set(runs[1::2]):
                if code == heads.HEAD_NULL:
                    continue
                cache_key = (topic, is_key, strategy, code)
                verdict = verdicts.get(cache_key, _MISSING)
                if verdict is _MISSING:
                    verdict = self._verdict(registry, topic, is_key, strategy, code)
                    if len(verdicts) >= MAX_VERDICTS:
                        verdicts.clear()
                    verdicts[cache_key] = verdict  # type: ignore[assignment]
                if verdict is not None:
                    bad[code] = verdict  # type: ignore[assignment]
            if not bad:
                continue
            whole: list[bytes | None] | None = None
            what = "key" if is_key else "value"
            for i in range(0, len(runs), 2):
                run_verdict = bad.get(runs[i + 1])
                if run_verdict is None:
                    continue
                stop = runs[i + 2] if i + 2 < len(runs) else count
                for index in range(runs[i], stop):
                    verdict: Refusal | None
                    if isinstance(run_verdict, _PerRecord):
                        if whole is None:
                            whole = _heads.fields(*section, count, is_key)
                        field = whole[index] or b""
                        verdict = self._message_verdict(registry, topic, is_key, strategy, field)
                        if verdict is None:
                            continue
                    else:
                        verdict = run_verdict
                    from_registry = from_registry or verdict.from_registry
                    reason = f"{what}: {verdict.reason}"
                    known = problems.get(index)
                    problems[index] = reason if known is None else f"{known}; {reason}"
        return problems, from_registry

    def _verdict(
        self, registry: SchemaRegistry, topic: str, is_key: bool, strategy: str, code: int
    ) -> Verdict:
        """The verdict on every record whose field has this head code (chronik.records.heads:
        its first five bytes, or a field too short to hold them)."""
        head = code.to_bytes(framing.HEADER_SIZE, "big") if code >= 0 else b""
        if not head or head[0] != framing.MAGIC:
            what = "key" if is_key else "value"
            return Refusal(
                f"no magic byte: the {what} does not start with byte 0 and a 4-byte schema id",
                False,
            )
        _, schema_id = framing.HEADER.unpack(head)
        stored = registry.state.schemas.get(schema_id)
        if stored is None:
            return Refusal(f"unknown schema id {schema_id}", True)
        name = subject_names.strategy_name(strategy) or subject_names.TOPIC_NAME
        if not subject_names.uses_record_name(name):
            return _registered(stored, subject_names.subject(name, topic, is_key))
        if stored.schema_type == "PROTOBUF":
            return PER_RECORD
        record = subject_names.record_name(stored.schema_type, stored.text)
        if record is None:
            return Refusal(
                f"schema id {schema_id} ({stored.schema_type}) names no record for {name}", False
            )
        return _registered(stored, subject_names.subject(name, topic, is_key, record))

    def _message_verdict(
        self, registry: SchemaRegistry, topic: str, is_key: bool, strategy: str, field: bytes
    ) -> Refusal | None:
        """The verdict of one Protobuf record under a record name strategy: its subject
        names the message its indexes point at."""
        _, schema_id = framing.HEADER.unpack_from(field)
        try:
            indexes, payload = framing.read_message_indexes(field[framing.HEADER_SIZE :])
        except framing.FramingError as exc:
            return Refusal(f"schema id {schema_id}: {exc}", False)
        end = len(field) - len(payload)
        cache_key = (topic, is_key, strategy, field[:end])
        verdict = self._verdicts.get(cache_key, _MISSING)
        if verdict is not _MISSING:
            return verdict  # type: ignore[return-value]
        stored = registry.state.schemas.get(schema_id)
        if stored is None:
            result: Refusal | None = Refusal(f"unknown schema id {schema_id}", True)
        else:
            name = subject_names.strategy_name(strategy) or subject_names.TOPIC_NAME
            try:
                message = registry.parsed(stored).message_name(indexes)  # type: ignore[attr-defined]
            except (RegistryError, SchemaError) as exc:
                result = Refusal(f"schema id {schema_id}: {exc}", False)
            else:
                result = _registered(stored, subject_names.subject(name, topic, is_key, message))
        if len(self._verdicts) >= MAX_VERDICTS:
            self._verdicts.clear()
        self._verdicts[cache_key] = result
        return result


def _registered(stored: StoredSchema, subject: str) -> Refusal | None:
    if any(name == subject for name, _ in stored.users):
        return None
    return Refusal(
        f"schema id {stored.schema_id} is not registered under subject {subject!r}", True
    )
