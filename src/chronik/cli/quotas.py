"""`chronik quotas alter|describe`: client quotas, with kafka-configs.sh's options.

    chronik quotas alter --entity-type users --entity-name alice \\
        --add-config producer_byte_rate=1048576,consumer_byte_rate=2097152
    chronik quotas alter --entity-type users --entity-name alice \\
        --entity-type clients --entity-default --delete-config producer_byte_rate
    chronik quotas describe [--entity-type clients [--entity-name app | --entity-default]]

Each `--entity-type` (users or clients; `--user`/`--client` are short for a type and a
name) is followed by its `--entity-name` or `--entity-default`; a type with neither
describes every entity of the type. Sent as AlterClientQuotas and DescribeClientQuotas
(librdkafka has no client for them) to the bootstrap broker, with `--command-config`'s
security settings.
"""

from __future__ import annotations

import argparse
from typing import Any

from chronik.cli.args import add_bootstrap
from chronik.cli.broker_requests import ask, error_name
from chronik.cli.errors import CliError
from chronik.cluster.replica_client import request_module
from chronik.protocol.compat import build

DESCRIBE = (48, 1)
ALTER = (49, 1)
TYPES = {"users": "user", "clients": "client-id", "user": "user", "client": "client-id"}
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2
# Kafka's way of naming an entity in kafka-configs' describe output.
WORDS = {"user": "user-principal", "client-id": "client-id"}


class _Entity(argparse.Action):
    """Keeps the entity parts in command-line order: [[type, name or None, named?], ...]."""

    def __call__(self, parser: Any, namespace: Any, value: Any, option: str | None = None) -> None:
        parts = getattr(namespace, "entity", None)
        if parts is None:
            parts = []
            namespace.entity = parts
        if option == "--entity-type":
            parts.append([TYPES[value], None, False])
            return
        if option in ("--user", "--client"):
            parts.append([TYPES[option[2:]], value, True])
            return
        if not parts or parts[-1][2]:
            parser.error(f"{option} needs an --entity-type before it")
        parts[-1][1] = value if option == "--entity-name" else None
        parts[-1][2] = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", parser_class=type(parser))
    sub.required = True
    alter = sub.add_parser("alter", help="set or remove quotas of a user, a client id or both")
    describe = sub.add_parser("describe", help="the quotas of the entities named")
    for command in (alter, describe):
        command.set_defaults(entity=None)
        command.add_argument("--entity-type", choices=("users", "clients"), action=_Entity,
                             help="users or clients (repeat for a user and client id pair)")
        command.add_argument("--entity-name", action=_Entity, metavar="NAME",
                             help="the name of the entity type before it")
        command.add_argument("--entity-default", action=_Entity, nargs=0,
                             help="the default entity of the type before it")
        command.add_argument("--user", action=_Entity, metavar="NAME",
                             help="short for --entity-type users --entity-name NAME")
        command.add_argument("--client", action=_Entity, metavar="ID",
                             help="short for --entity-type clients --entity-name ID")
        add_bootstrap(command)
    alter.add_argument("--add-config", action="append", default=[], metavar="K=V[,K=V]",
                       help="producer_byte_rate, consumer_byte_rate, request_percentage, "
                       "controller_mutation_rate")
    alter.add_argument("--delete-config", action="append", default=[], metavar="K[,K]",
                       help="keys to remove")
    alter.add_argument("--validate-only", action="store_true",
                       help="have the broker check the change without making it")


def run(args: argparse.Namespace) -> int:
    parts = args.entity or []
    seen = [t for t, _, _ in parts]
    if len(set(seen)) != len(seen):
        raise CliError("each entity type may be named once")
    if args.action == "alter":
        return _alter(args, parts)
    return _describe(args, parts)


def _alter(args: argparse.Namespace, parts: list[list[Any]]) -> int:
    if not parts or not all(named for _, _, named in parts):
        raise CliError("alter needs an entity: --entity-type with --entity-name or "
                       "--entity-default (or --user/--client)")
    ops: dict[str, tuple[float, bool]] = {}
    for text in args.add_config:
        for item in filter(None, (i.strip() for i in text.split(","))):
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise CliError(f"--add-config wants key=value, got {item!r}")
            try:
                ops[key.strip()] = (float(value), False)
            except ValueError:
                raise CliError(f"{key}: {value!r} is not a number") from None
    for text in args.delete_config:
        for key in filter(None, (i.strip() for i in text.split(","))):
            ops[key] = (0.0, True)
    if not ops:
        raise CliError("nothing to change: give --add-config or --delete-config")
    module = request_module(*ALTER)
    entry = build(
        module.EntryData,
        entity=tuple(build(module.EntityData, entity_type=t, entity_name=n) for t, n, _ in parts),
        ops=tuple(build(module.OpData, key=k, value=v, remove=r) for k, (v, r) in ops.items()),
    )
    response = ask(args, ALTER, entries=(entry,), validate_only=args.validate_only)
    for result in response.entries:
        if int(result.error_code):
            message = result.error_message or ""
            raise CliError(f"{error_name(result.error_code)}: {message}".rstrip())
    what = "would be" if args.validate_only else "were"
    print(f"Quota configs of {_name([(t, n) for t, n, _ in parts])} {what} altered.")
    return 0


def _describe(args: argparse.Namespace, parts: list[list[Any]]) -> int:
    module = request_module(*DESCRIBE)
    components = []
    for entity_type, name, named in parts:
        if not named:
            match_type = MATCH_SPECIFIED
        else:
            match_type = MATCH_DEFAULT if name is None else MATCH_EXACT
        components.append(
            build(module.ComponentData, entity_type=entity_type, match_type=match_type,
                  match=name)
        )
    # As kafka-configs: the entities of exactly the types named (all of them without any).
    response = ask(args, DESCRIBE, components=tuple(components), strict=bool(parts))
    if int(response.error_code):
        raise CliError(
            f"{error_name(response.error_code)}: {response.error_message or ''}".rstrip()
        )
    for entry in response.entries or ():
        entity = [(e.entity_type, e.entity_name) for e in entry.entity]
        values = ",".join(f"{v.key}={float(v.value)}" for v in entry.values)
        print(f"Quota configs for {_name(entity)} are {values}")
    return 0


def _name(entity: list[tuple[str, str | None]]) -> str:
    order = {"user": 0, "client-id": 1}
    words = []
    for entity_type, name in sorted(entity, key=lambda part: order.get(part[0], 2)):
        word = WORDS.get(entity_type, entity_type)
        words.append(f"the default {word}" if name is None else f"{word} '{name}'")
    return ", ".join(words)
