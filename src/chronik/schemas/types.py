"""What every schema format offers the registry: a parsed schema that can say its
canonical text, its normal form, what breaks when it reads data written with another
schema, and whether a value (in its JSON form) fits it.

References (Confluent's ``references``: a name, a subject and a version) reach a format
already resolved: a mapping from each reference's name (an Avro type's full name, a
.proto import path, a JSON Schema ``$ref`` URL) to the referenced schema's text, with the
references of those references included, so parsing needs no registry.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

SCHEMA_TYPES = ("AVRO", "JSON", "PROTOBUF")


class SchemaError(ValueError):
    """A schema that does not parse or is not valid for its format (Confluent's 42201)."""


class ValueMismatch(ValueError):
    """A value that does not fit a schema; the message names where and why."""


class ParsedSchema(Protocol):
    schema_type: str

    def canonical(self) -> str:
        """The text the registry stores and answers with, and compares a lookup by: the
        schema as given, re-serialized without insignificant whitespace."""
        ...

    def normalized(self) -> ParsedSchema:
        """The schema in its normal form (``normalize=true``): equivalent schemas that
        differ only in order of unordered parts, defaults spelled out, or aliases of
        spelling have one normal form."""
        ...

    def compatibility_errors(self, writer: ParsedSchema) -> list[str]:
        """What breaks when data written with ``writer`` is read with this schema as the
        reader; empty when it reads. Each message is one of Confluent's verbose ones:
        ``{errorType:'...', description:'...', additionalInfo:'...'}``."""
        ...

    def validate(self, value: Any) -> None:
        """Raise ValueMismatch unless ``value`` (decoded JSON: dicts, lists, str, int,
        float, bool, None) is an instance of this schema."""
        ...


class Format(Protocol):
    def parse(self, text: str, references: Mapping[str, str]) -> ParsedSchema:
        """Raise SchemaError naming what is wrong."""
        ...
