"""`chronik events read|append TOPIC KEY`: one aggregate's events on a topic with
key.versioning.enable, through the broker's event store HTTP API (chronik.eventstore).

  read    prints each event as "VERSION<TAB>VALUE" (--json: one JSON object a line, with
          offset, partition, timestamp and headers; binary values in base64)
  append  appends the --value arguments, or stdin's lines, as one batch; with
          --expected-version N (or --new: the key must not exist yet) only if the key has
          exactly N events, else "version conflict on key ..." and exit 1

--http names the API (default $CHRONIK_HTTP or http://127.0.0.1:8080); --command-config's
sasl.username / sasl.password are its Basic credentials too.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
from typing import Any

from chronik.cli.args import add_bootstrap
from chronik.cli.errors import CliError

DEFAULT_HTTP = "http://127.0.0.1:8080"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION")
    sub.required = True
    read = sub.add_parser("read", help="print a key's events", description="print a key's events")
    _common(read)
    read.add_argument("--from-version", type=int, default=0, metavar="N")
    read.add_argument("--limit", type=int, default=None, metavar="N")
    read.add_argument("--json", action="store_true", help="one JSON object per event")
    append = sub.add_parser(
        "append", help="append events to a key", description="append events to a key"
    )
    _common(append)
    cond = append.add_mutually_exclusive_group()
    cond.add_argument(
        "--expected-version",
        type=int,
        default=None,
        metavar="N",
        help="append only if the key has exactly N events",
    )
    cond.add_argument("--new", action="store_true", help="append only if the key has no events")
    append.add_argument(
        "--value",
        action="append",
        default=None,
        metavar="V",
        help="an event's value (repeatable); without it, one event per stdin line",
    )
    append.add_argument(
        "--header", action="append", default=[], metavar="K=V", help="a header on every event"
    )


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("topic", metavar="TOPIC")
    parser.add_argument("key", metavar="KEY")
    parser.add_argument(
        "--http",
        default=None,
        metavar="URL",
        help=f"the event store HTTP API (default $CHRONIK_HTTP or {DEFAULT_HTTP})",
    )
    add_bootstrap(parser)


def _store(args: argparse.Namespace) -> Any:
    from chronik.cli.clients import load_command_config
    from chronik.eventstore import EventStore

    config = load_command_config(args.command_config)
    url = args.http or os.environ.get("CHRONIK_HTTP") or DEFAULT_HTTP
    try:
        return EventStore(
            args.bootstrap_server, url, http_timeout=args.connect_timeout * 6, **config
        )
    except ValueError as exc:
        raise CliError(str(exc), 2) from None


def run(args: argparse.Namespace) -> int:
    from chronik.eventstore import EventStoreError, VersionConflict

    store = _store(args)
    try:
        if args.action == "read":
            return _read(store, args)
        return _append(store, args)
    except VersionConflict as exc:
        raise CliError(str(exc)) from None
    except EventStoreError as exc:
        raise CliError(str(exc) or exc.error) from None
    finally:
        store.close()


def _read(store: Any, args: argparse.Namespace) -> int:
    if args.from_version < 0 or (args.limit is not None and args.limit < 1):
        raise CliError("--from-version must be 0 or more and --limit 1 or more", 2)
    events = store.read(args.topic, args.key, args.from_version, args.limit)
    out = sys.stdout
    for e in events:
        if args.json:
            value, encoding = _text(e.value)
            doc = {
                "version": e.version,
                "offset": e.offset,
                "partition": e.partition,
                "timestamp": e.timestamp,
                "value": value,
                "value_encoding": encoding,
                "headers": [
                    dict(zip(("key", "value", "value_encoding"), (k, *_text(v)), strict=True))
                    for k, v in e.headers
                ],
            }
            out.write(json.dumps(doc, ensure_ascii=False) + "\n")
        else:
            out.write(f"{e.version}\t{_text(e.value)[0] if e.value is not None else ''}\n")
    out.flush()
    return 0


def _append(store: Any, args: argparse.Namespace) -> int:
    values = args.value
    if values is None:
        values = [line.rstrip("\n") for line in sys.stdin]
        values = [v[:-1] if v.endswith("\r") else v for v in values if v != ""]
    if not values:
        raise CliError("nothing to append: give --value or lines on stdin", 2)
    headers = []
    for item in args.header:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise CliError(f"--header wants k=v, got {item!r}", 2)
        headers.append((name, value))
    expected = 0 if args.new else args.expected_version
    if expected is not None and expected < 0:
        raise CliError("--expected-version must be 0 or more", 2)
    done = store.append(args.topic, args.key, list(values), expected, headers or None)
    versions = done.versions
    span = str(versions[0]) if len(versions) == 1 else f"{versions[0]}-{versions[-1]}"
    print(
        f"appended {len(versions)} event(s) to {args.key!r}: version {span}, "
        f"partition {done.partition}, offset {done.offsets[0]}"
    )
    return 0


def _text(data: bytes | None) -> tuple[str | None, str | None]:
    if data is None:
        return None, None
    try:
        return data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        return base64.b64encode(data).decode("ascii"), "base64"
