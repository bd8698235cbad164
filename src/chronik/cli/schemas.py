"""`chronik schemas ...`: the schema registry a broker serves (or any Confluent-compatible
one), from the command line.

  list [--prefix P] [--deleted]           subjects, one a line (soft-deleted ones marked)
  show SUBJECT [--version V] | --id ID    id, version, type, references, the schema text
  register SUBJECT FILE [--type T] [--reference NAME=SUBJECT:VERSION ...] [--normalize]
                                          prints the schema's id
  check SUBJECT FILE [--version V] [--type T]
                                          "compatible" (exit 0) or "incompatible" and why (1)
  config [SUBJECT] [--set LEVEL | --delete]
  mode [SUBJECT] [--set MODE [--force] | --delete]
  delete SUBJECT [--version V] [--permanent]

A file's type is told by its extension (.avsc Avro, .json JSON Schema, .proto Protobuf)
unless --type says it; FILE '-' is stdin. The connection options are
chronik.cli.registry_client's.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from chronik.cli.errors import CliError
from chronik.cli.registry_client import Registry, RegistrySettings, add_registry_options
from chronik.registry.state import MODES
from chronik.schemas.compatibility import LEVELS
from chronik.schemas.types import SCHEMA_TYPES

if TYPE_CHECKING:
    from confluent_kafka.schema_registry import Schema, SchemaReference

TYPES = SCHEMA_TYPES
EXTENSIONS = {".avsc": "AVRO", ".json": "JSON", ".proto": "PROTOBUF"}
# A schema file larger than this is a mistake (the registry takes 2 MiB by default).
MAX_FILE_BYTES = 16 << 20


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION")
    sub.required = True

    def action(name: str, summary: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=summary, description=summary)

    ls = action("list", "list subjects")
    ls.add_argument("--prefix", default="", metavar="P", help="only subjects starting with P")
    ls.add_argument("--deleted", action="store_true", help="soft-deleted subjects too")

    show = action("show", "a subject's version, or a schema by its id")
    show.add_argument("subject", nargs="?", metavar="SUBJECT")
    show.add_argument(
        "--version", type=version_spec, default="latest", metavar="V", help="(default latest)"
    )
    show.add_argument("--id", type=schema_id, default=None, metavar="ID", help="a schema by id")

    register = action("register", "register a schema file under a subject; prints its id")
    register.add_argument("subject", metavar="SUBJECT")
    register.add_argument("file", metavar="FILE")
    _type_option(register)
    register.add_argument(
        "--reference",
        action="append",
        type=reference,
        default=[],
        metavar="NAME=SUBJECT:VERSION",
        help="a schema this one refers to by NAME (repeatable)",
    )
    register.add_argument(
        "--normalize", action="store_true", help="register the schema's normal form"
    )

    check = action("check", "whether a schema file is compatible with a subject's versions")
    check.add_argument("subject", metavar="SUBJECT")
    check.add_argument("file", metavar="FILE")
    check.add_argument(
        "--version", type=version_spec, default="latest", metavar="V", help="(default latest)"
    )
    _type_option(check)
    check.add_argument(
        "--reference",
        action="append",
        type=reference,
        default=[],
        metavar="NAME=SUBJECT:VERSION",
        help="a schema this one refers to by NAME (repeatable)",
    )

    config = action("config", "the compatibility level, global or a subject's")
    config.add_argument("subject", nargs="?", metavar="SUBJECT")
    change = config.add_mutually_exclusive_group()
    change.add_argument(
        "--set",
        type=str.upper,
        choices=LEVELS,
        default=None,
        metavar="LEVEL",
        help=", ".join(LEVELS),
    )
    change.add_argument("--delete", action="store_true", help="remove the level set here")

    mode = action("mode", "the registry's mode, global or a subject's")
    mode.add_argument("subject", nargs="?", metavar="SUBJECT")
    change = mode.add_mutually_exclusive_group()
    change.add_argument(
        "--set", type=str.upper, choices=MODES, default=None, metavar="MODE", help=", ".join(MODES)
    )
    change.add_argument("--delete", action="store_true", help="remove the subject's own mode")
    mode.add_argument(
        "--force", action="store_true", help="IMPORT even where schemas are registered"
    )

    delete = action("delete", "delete a subject or one version (soft, then --permanent)")
    delete.add_argument("subject", metavar="SUBJECT")
    delete.add_argument(
        "--version", type=version_spec, default=None, metavar="V", help="only this version"
    )
    delete.add_argument("--permanent", action="store_true", help="hard-delete (after a soft one)")

    for child in sub.choices.values():
        add_registry_options(child)


def _type_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--type",
        type=str.upper,
        choices=TYPES,
        default=None,
        help="AVRO, JSON or PROTOBUF (default: by the file's extension)",
    )


def version_spec(text: str) -> str | int:
    if text.lower() in ("latest", "-1"):
        return "latest"
    if text.isdigit() and int(text) > 0:
        return int(text)
    raise argparse.ArgumentTypeError(f"a version is 'latest' or a number from 1, got {text!r}")


def schema_id(text: str) -> int:
    if text.isdigit():
        return int(text)
    raise argparse.ArgumentTypeError(f"a schema id is a number from 0, got {text!r}")


def reference(text: str) -> tuple[str, str, int]:
    """``NAME=SUBJECT:VERSION`` (the version is after the last ':', so a subject may hold
    one; the name ends at the first '=')."""
    name, sep, rest = text.partition("=")
    subject, colon, version = rest.rpartition(":")
    if not sep or not name or not colon or not subject or not version.isdigit():
        raise argparse.ArgumentTypeError(f"expected NAME=SUBJECT:VERSION, got {text!r}")
    if int(version) < 1:
        raise argparse.ArgumentTypeError(f"a reference's version is from 1, got {text!r}")
    return name, subject, int(version)


def run(args: argparse.Namespace) -> int:
    registry = Registry(RegistrySettings.from_args(args))
    try:
        handler = {
            "list": _list,
            "show": _show,
            "register": _register,
            "check": _check,
            "config": _config,
            "mode": _mode,
            "delete": _delete,
        }[args.action]
        return handler(registry, args)
    finally:
        registry.close()


# -- reading ---------------------------------------------------------------------------------
def _list(registry: Registry, args: argparse.Namespace) -> int:
    prefix = args.prefix or None
    names = registry.call(lambda c: c.get_subjects(prefix, deleted=args.deleted))
    gone: set[str] = set()
    if args.deleted:
        # The ones not among the live: every registry tells these apart the same way.
        gone = set(names) - set(registry.call(lambda c: c.get_subjects(prefix)))
    for name in sorted(names):
        print(f"{name}  (deleted)" if name in gone else name)
    return 0


def _show(registry: Registry, args: argparse.Namespace) -> int:
    if (args.subject is None) == (args.id is None):
        raise CliError("show wants a SUBJECT or --id ID (one of them)", 2)
    if args.id is not None and args.version != "latest":
        raise CliError("--version goes with a SUBJECT, not with --id", 2)
    if args.id is not None:
        schema = registry.call(lambda c: c.get_schema(args.id))
        uses = registry.call(lambda c: c.get_schema_versions(args.id))
        print(f"id:         {args.id}")
        print(f"type:       {schema.schema_type or 'AVRO'}")
        used = ", ".join(f"{u.subject} v{u.version}" for u in uses) or "(none)"
        print(f"used by:    {used}")
    else:
        found = registry.call(
            lambda c: (
                c.get_latest_version(args.subject)
                if args.version == "latest"
                else c.get_version(args.subject, args.version)
            )
        )
        schema = found.schema
        print(f"subject:    {found.subject}")
        print(f"version:    {found.version}")
        print(f"id:         {found.schema_id}")
        print(f"type:       {schema.schema_type or 'AVRO'}")
    refs = schema.references or []
    print("references: (none)" if not refs else "references:")
    for ref in refs:
        print(f"  {ref.name} = {ref.subject}:{ref.version}")
    print("schema:")
    print(pretty(schema.schema_type or "AVRO", schema.schema_str or ""))
    return 0


def pretty(schema_type: str, text: str) -> str:
    """Avro and JSON Schema indented; Protobuf as written."""
    if schema_type in ("AVRO", "JSON"):
        try:
            return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except ValueError:
            pass
    return text.rstrip("\n")


# -- writing ---------------------------------------------------------------------------------
def _schema(args: argparse.Namespace) -> Schema:
    from confluent_kafka.schema_registry import Schema

    schema_type = args.type or _type_of(args.file)
    references = [_reference(*r) for r in args.reference]
    return Schema(read_schema_file(args.file), schema_type, references)


def _reference(name: str, subject: str, version: int) -> SchemaReference:
    from confluent_kafka.schema_registry import SchemaReference

    return SchemaReference(name, subject, version)


def _type_of(path: str) -> str:
    found = EXTENSIONS.get(Path(path).suffix.lower())
    if found is None:
        raise CliError(
            f"cannot tell the schema type of {path!r} by its extension "
            "(.avsc, .json, .proto): give --type AVRO|JSON|PROTOBUF",
            2,
        )
    return found


def read_schema_file(path: str) -> str:
    try:
        if path == "-":
            data = sys.stdin.buffer.read(MAX_FILE_BYTES + 1)
        else:
            with open(path, "rb") as f:
                data = f.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror}") from None
    if len(data) > MAX_FILE_BYTES:
        raise CliError(f"{path} is larger than {MAX_FILE_BYTES} bytes: not a schema")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise CliError(f"{path} is not UTF-8 text") from None
    if not text.strip():
        raise CliError(f"{path} is empty")
    return text


def _register(registry: Registry, args: argparse.Namespace) -> int:
    schema = _schema(args)
    new_id = registry.call(
        lambda c: c.register_schema(args.subject, schema, normalize_schemas=args.normalize)
    )
    print(new_id)
    return 0


def _check(registry: Registry, args: argparse.Namespace) -> int:
    # SchemaRegistryClient.test_compatibility answers a bool only: the messages need HTTP.
    schema = _schema(args)
    path = (
        f"/compatibility/subjects/{quote(args.subject, safe='')}/versions/"
        f"{quote(str(args.version), safe='')}?verbose=true"
    )
    answer = registry.http("POST", path, schema.to_dict())
    if not isinstance(answer, dict) or not isinstance(answer.get("is_compatible"), bool):
        raise CliError("the registry's answer to a compatibility check has no is_compatible")
    if answer["is_compatible"]:
        print("compatible")
        return 0
    print("incompatible")
    for message in answer.get("messages") or []:
        print(f"  {message}")
    return 1


def _config(registry: Registry, args: argparse.Namespace) -> int:
    subject = args.subject
    where = f"subject {subject!r}" if subject else "global"
    if args.set is not None:
        registry.call(lambda c: c.set_compatibility(subject, args.set))
        print(f"{where}: compatibility {args.set}")
    elif args.delete:
        before = registry.call(lambda c: c.delete_config(subject))
        level = before.compatibility_level or before.compatibility
        was = f" (was {level.value})" if level is not None else ""
        if subject:
            print(f"{where}: its own compatibility level removed{was}; the global one applies")
        else:
            print(f"global: compatibility level reset to the default{was}")
    else:
        print(_effective(registry, subject, lambda c, s: c.get_compatibility(s)))
    return 0


def _mode(registry: Registry, args: argparse.Namespace) -> int:
    subject = args.subject
    where = f"subject {subject!r}" if subject else "global"
    if args.force and args.set is None:
        raise CliError("--force goes with --set", 2)
    if args.set is not None:
        mode = registry.call(
            lambda c: (
                c.update_mode(subject, args.set, args.force)
                if subject
                else c.update_global_mode(args.set, args.force)
            )
        )
        print(f"{where}: mode {mode}")
    elif args.delete:
        if not subject:
            raise CliError("the global mode cannot be deleted: give a SUBJECT, or --set", 2)
        before = registry.call(lambda c: c.delete_mode(subject))
        print(f"{where}: its own mode removed (was {before}); the global one applies")
    else:
        print(
            _effective(
                registry,
                subject,
                lambda c, s: c.get_mode(s) if s else c.get_global_mode(),
            )
        )
    return 0


def _effective(registry: Registry, subject: str | None, get: Any) -> str:
    """The subject's own setting, else the global one, saying which it is."""
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    if subject is None:
        return str(registry.call(lambda c: get(c, None)))

    def own_or_none(c: Any) -> str | None:
        try:
            return str(get(c, subject))
        except SchemaRegistryError as exc:
            # 40408 / 40409: the subject has no level or mode of its own.
            if exc.error_code in (40408, 40409):
                return None
            raise

    own = registry.call(own_or_none)
    if own is not None:
        return own
    return f"{registry.call(lambda c: get(c, None))} (global; {subject!r} has none of its own)"


def _delete(registry: Registry, args: argparse.Namespace) -> int:
    how = "permanently " if args.permanent else ""
    if args.version is None:
        versions = registry.call(lambda c: c.delete_subject(args.subject, args.permanent))
        listed = ", ".join(map(str, versions)) or "none"
        print(f"{how}deleted subject {args.subject!r}: versions {listed}")
    else:
        number = registry.call(
            lambda c: c.delete_version(args.subject, args.version, args.permanent)
        )
        print(f"{how}deleted version {number} of subject {args.subject!r}")
    return 0
