"""`chronik` entry point: picks the subcommand and turns failures into one line.

Each subcommand lives in its own module exposing `add_arguments(parser)` and
`run(args) -> int`; only the module of the command being run is imported, so
`chronik consume` starts without loading the broker and `--help` stays fast.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence

from chronik.cli.args import Parser
from chronik.cli.errors import CliError, describe_kafka_error

COMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("chronik.cli.serve", "run a broker"),
    "topics": ("chronik.cli.topics", "create, list, describe, alter and delete topics"),
    "produce": ("chronik.cli.produce", "write lines from stdin or a file as records"),
    "consume": ("chronik.cli.consume", "print records of a topic"),
    "groups": ("chronik.cli.groups", "list, describe, reset and delete consumer groups"),
    "offsets": ("chronik.cli.offsets", "earliest and latest offset of each partition"),
    "bench": ("chronik.cli.bench", "producer and consumer throughput and latency"),
    "cluster": (
        "chronik.cli.cluster",
        "brokers, the controller, leaders; rebalance replicas or decommission a broker",
    ),
    "partitions": (
        "chronik.cli.partitions",
        "move partition replicas between brokers (kafka-reassign-partitions)",
    ),
    "users": ("chronik.cli.users", "add, delete and list SCRAM users"),
    "acls": ("chronik.cli.acls", "add, list and remove ACL bindings"),
    "events": ("chronik.cli.events", "read and append one key's events (versioned topics)"),
    "quotas": ("chronik.cli.quotas", "alter and describe client quotas (byte rates)"),
    "schemas": (
        "chronik.cli.schemas",
        "list, show, register, check and delete schemas in the schema registry",
    ),
    "transactions": (
        "chronik.cli.transactions",
        "list and describe transactions and the producers of a partition",
    ),
}


def build_parser(command: str | None) -> Parser:
    parser = Parser(
        prog="chronik",
        description="chronik: a durable event log that speaks the Kafka protocol.",
    )
    parser.add_argument(
        "--verbose", action="store_true", help="show the Kafka client library's own log lines"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    for name, (module_name, summary) in COMMANDS.items():
        child = sub.add_parser(name, help=summary, description=summary)
        if name == command:
            module = importlib.import_module(module_name)
            module.add_arguments(child)
            child.set_defaults(handler=module.run)
    return parser


def chosen_command(argv: Sequence[str]) -> str | None:
    for arg in argv:
        if not arg.startswith("-"):
            return arg if arg in COMMANDS else None
    return None


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        parser = build_parser(chosen_command(argv))
        args = parser.parse_args(argv)
        if args.verbose:
            from chronik.cli.clients import show_client_logs

            show_client_logs()
        return int(args.handler(args) or 0)
    except CliError as exc:
        print(f"chronik: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`chronik consume ... | head`): not an error worth a message.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    except ImportError as exc:
        if exc.name == "chronik.cli.serve":
            print("chronik: error: the broker is not part of this installation", file=sys.stderr)
            return 1
        raise
    except Exception as exc:  # a client error we did not foresee still gets one line
        from confluent_kafka import KafkaException

        if isinstance(exc, KafkaException):
            print(f"chronik: error: {describe_kafka_error(exc)}", file=sys.stderr)
            return 1
        raise


if __name__ == "__main__":
    raise SystemExit(main())
