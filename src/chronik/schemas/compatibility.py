"""Compatibility levels (Confluent's seven) over a format's reader/writer check.

BACKWARD: the new schema reads data written with the old one. FORWARD: the old schema
reads data written with the new one. FULL: both. Without _TRANSITIVE only the latest
registered version is checked; with it, every version still registered.
"""

from __future__ import annotations

from collections.abc import Sequence

from .types import ParsedSchema

LEVELS = (
    "NONE",
    "BACKWARD",
    "BACKWARD_TRANSITIVE",
    "FORWARD",
    "FORWARD_TRANSITIVE",
    "FULL",
    "FULL_TRANSITIVE",
)


def incompatibilities(
    level: str, new: ParsedSchema, old_versions: Sequence[tuple[int, ParsedSchema]]
) -> list[str]:
    """Every message of what breaks between ``new`` and the registered versions it must be
    checked against (``old_versions``: (version, schema), oldest first); empty when the
    new schema is compatible. Each breach is followed by the version it breaks with, as
    Confluent's verbose answer has it."""
    if level == "NONE" or not old_versions:
        return []
    base = level.removesuffix("_TRANSITIVE")
    against = old_versions if level.endswith("_TRANSITIVE") else old_versions[-1:]
    out: list[str] = []
    for version, old in reversed(against):
        errors: list[str] = []
        if base in ("BACKWARD", "FULL"):
            errors.extend(new.compatibility_errors(old))
        if base in ("FORWARD", "FULL"):
            errors.extend(old.compatibility_errors(new))
        if errors:
            out.extend(errors)
            out.append(f"{{oldSchemaVersion: {version}}}")
            out.append(f"{{oldSchema: '{old.canonical()}'}}")
    if out:
        out.append(f"{{compatibility: '{level}'}}")
    return out
