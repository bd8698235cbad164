"""The registry's state, as the ``_schemas`` topic says it is: applying its records in
log order (``apply``) gives every broker the same subjects, versions, ids, configs and
modes. Nothing here writes; the writer (chronik.registry.registry) decides what to
append and applies it once it is durable.

Memory: one entry per registered schema text and per subject version, each holding its
text once (a schema registered under many subjects is kept once, by id); bounded by
schema.registry.max.schemas and schema.registry.max.schema.bytes (chronik.registry.limits).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from chronik.registry import topic_format as fmt
from chronik.registry.topic_format import BadRecord, Reference, SchemaValue

log = logging.getLogger("chronik.registry")

DEFAULT_COMPATIBILITY = "BACKWARD"
DEFAULT_MODE = "READWRITE"
MODES = ("READWRITE", "READONLY", "READONLY_OVERRIDE", "IMPORT")

# A schema's identity: one global id per (type, text, references) across subjects.
Identity = tuple[str, str, tuple[Reference, ...]]


@dataclass
class StoredSchema:
    schema_id: int
    schema_type: str
    text: str
    references: tuple[Reference, ...]
    # (subject, version) pairs that use this id, soft-deleted ones included
    users: set[tuple[str, int]] = field(default_factory=set)

    @property
    def identity(self) -> Identity:
        return (self.schema_type, self.text, self.references)


@dataclass
class SubjectVersion:
    subject: str
    version: int
    schema_id: int
    deleted: bool


@dataclass
class Config:
    compatibility: str
    normalize: bool | None = None


class RegistryState:
    def __init__(self) -> None:
        self.schemas: dict[int, StoredSchema] = {}
        self.ids: dict[Identity, int] = {}
        self.subjects: dict[str, dict[int, SubjectVersion]] = {}
        self.configs: dict[str | None, Config] = {}
        self.modes: dict[str | None, str] = {}
        # Ids only grow: the largest ever seen, hard-deleted ones included.
        self.max_id = 0
        self.next_offset = 0
        self.bad_records = 0

    # -- applying the log ----------------------------------------------------------------
    def apply(self, key: bytes | None, value: bytes | None, offset: int) -> None:
        """Apply one record of the topic. A record not in the format is skipped with a
        log line, as Confluent's and Karapace's readers skip it: the topic is a topic any
        client with the ACLs could write to, and one bad record must not stop a registry."""
        self.next_offset = offset + 1
        if key is None:
            return
        try:
            parsed = fmt.parse_key(key)
            obj = fmt.parse_value(value)
            if parsed.keytype == fmt.SCHEMA:
                if obj is None:
                    assert parsed.subject is not None and parsed.version is not None
                    self._hard_delete(parsed.subject, parsed.version)
                else:
                    self._put_schema(fmt.parse_schema_value(obj))
            elif parsed.keytype == fmt.CONFIG:
                self._put_config(parsed.subject, obj)
            elif parsed.keytype == fmt.MODE:
                self._put_mode(parsed.subject, obj)
            elif parsed.keytype == fmt.DELETE_SUBJECT and obj is not None:
                assert parsed.subject is not None
                version = obj.get("version")
                if not isinstance(version, int):
                    raise BadRecord("DELETE_SUBJECT value without a version")
                self._soft_delete_subject(parsed.subject, version)
        except BadRecord as exc:
            self.bad_records += 1
            log.warning("_schemas: skipping the record at offset %d: %s", offset, exc)

    def _put_schema(self, value: SchemaValue) -> None:
        if value.schema_id <= 0 or value.version <= 0:
            raise BadRecord(f"id {value.schema_id} / version {value.version} not positive")
        identity: Identity = (value.schema_type, value.schema, value.references)
        stored = self.schemas.get(value.schema_id)
        if stored is None:
            stored = StoredSchema(
                value.schema_id, value.schema_type, value.schema, value.references
            )
            self.schemas[value.schema_id] = stored
            self.ids.setdefault(identity, value.schema_id)
        elif stored.identity != identity:
            raise BadRecord(f"id {value.schema_id} already names another schema")
        versions = self.subjects.setdefault(value.subject, {})
        old = versions.get(value.version)
        if old is not None and old.schema_id != value.schema_id:
            self._release(old)
        versions[value.version] = SubjectVersion(
            value.subject, value.version, value.schema_id, value.deleted
        )
        stored.users.add((value.subject, value.version))
        self.max_id = max(self.max_id, value.schema_id)

    def _release(self, version: SubjectVersion) -> None:
        stored = self.schemas.get(version.schema_id)
        if stored is None:
            return
        stored.users.discard((version.subject, version.version))
        if not stored.users:
            del self.schemas[version.schema_id]
            if self.ids.get(stored.identity) == version.schema_id:
                del self.ids[stored.identity]

    def _hard_delete(self, subject: str, version: int) -> None:
        versions = self.subjects.get(subject)
        if versions is None or version not in versions:
            return
        self._release(versions.pop(version))
        if not versions:
            del self.subjects[subject]

    def _soft_delete_subject(self, subject: str, up_to: int) -> None:
        for number, entry in self.subjects.get(subject, {}).items():
            if number <= up_to:
                entry.deleted = True

    def _put_config(self, subject: str | None, obj: dict[str, object] | None) -> None:
        if obj is None:
            self.configs.pop(subject, None)
            return
        level = obj.get("compatibilityLevel")
        if not isinstance(level, str):
            raise BadRecord("CONFIG value without a compatibilityLevel")
        normalize = obj.get("normalize")
        self.configs[subject] = Config(
            level.upper(), normalize if isinstance(normalize, bool) else None
        )

    def _put_mode(self, subject: str | None, obj: dict[str, object] | None) -> None:
        if obj is None:
            self.modes.pop(subject, None)
            return
        mode = obj.get("mode")
        if not isinstance(mode, str) or mode.upper() not in MODES:
            raise BadRecord(f"MODE value with an unknown mode {mode!r}")
        self.modes[subject] = mode.upper()

    # -- reading ------------------------------------------------------------------------
    def versions(self, subject: str, *, deleted: bool = False) -> list[SubjectVersion]:
        """A subject's versions, oldest first; soft-deleted ones only with ``deleted``."""
        entries = self.subjects.get(subject, {})
        return [entries[v] for v in sorted(entries) if deleted or not entries[v].deleted]

    def subject_names(self, *, deleted: bool = False, deleted_only: bool = False) -> list[str]:
        out = []
        for name, entries in self.subjects.items():
            live = any(not e.deleted for e in entries.values())
            if deleted_only:
                if not live:
                    out.append(name)
            elif live or deleted:
                out.append(name)
        return sorted(out)

    def compatibility(self, subject: str | None) -> str:
        own = self.configs.get(subject) if subject is not None else None
        if own is not None:
            return own.compatibility
        glob = self.configs.get(None)
        return glob.compatibility if glob is not None else DEFAULT_COMPATIBILITY

    def normalize(self, subject: str | None) -> bool:
        """The subject's ``normalize`` setting, else the global one, else off."""
        for key in (subject, None) if subject is not None else (None,):
            config = self.configs.get(key)
            if config is not None and config.normalize is not None:
                return config.normalize
        return False

    def mode(self, subject: str | None) -> str:
        if subject is not None and subject in self.modes:
            return self.modes[subject]
        return self.modes.get(None, DEFAULT_MODE)

    def referenced_by(self, subject: str, version: int) -> list[int]:
        """Ids of the schemas (live versions) that reference ``subject`` version."""
        out = set()
        for stored in self.schemas.values():
            if any(
                r.subject == subject and r.version == version for r in stored.references
            ) and any(
                not self.subjects[s][v].deleted for s, v in stored.users if s in self.subjects
            ):
                out.add(stored.schema_id)
        return sorted(out)

    def schema_count(self) -> int:
        return len(self.schemas)
