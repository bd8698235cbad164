"""`chronik serve`: run a broker until SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", default="./chronik-data", help="where the log lives")
    parser.add_argument(
        "--listen",
        default=None,
        help="HOST:PORT of one PLAINTEXT listener (default 127.0.0.1:9092); "
        "the listeners setting names several, each with its security protocol",
    )
    parser.add_argument(
        "--advertised-host",
        default=None,
        help="host name given to clients (default: the listen host)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Kafka broker setting, e.g. num.partitions=3 (repeatable)",
    )
    parser.add_argument(
        "--config", default=None, metavar="FILE", help="a Kafka server.properties file"
    )
    parser.add_argument(
        "--metrics-listen", default=None, metavar="HOST:PORT", help="serve Prometheus /metrics here"
    )
    parser.add_argument(
        "--http-listen",
        default=None,
        metavar="HOST:PORT",
        help="serve the event store's HTTP API here (https://HOST:PORT for TLS); "
        "the broker setting http.listen does the same",
    )
    parser.add_argument(
        "--console",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="serve the web console at /console/ on the HTTP listener (default: only when "
        "that listener is on a loopback address); the broker setting console.enable does "
        "the same",
    )
    parser.add_argument(
        "--schema-registry-listen",
        default=None,
        metavar="HOST:PORT",
        help="serve Confluent Schema Registry's REST API here (https://HOST:PORT for TLS); "
        "the broker setting schema.registry.listen does the same",
    )
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR")
    parser.add_argument("--log-format", default="text", choices=("text", "json"))


def parse_listen(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"--listen wants HOST:PORT, got {value!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


def run(args: argparse.Namespace) -> int:
    from chronik.broker.config import ConfigError
    from chronik.broker.logs import configure_logging
    from chronik.broker.server import Broker, BrokerStartError, serve_until_signalled

    configure_logging(args.log_level, args.log_format)
    settings: dict[str, str] = {}
    if args.config:
        from chronik.cli.properties import load_properties

        settings.update(load_properties(args.config))
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            print(f"chronik: error: --set wants key=value, got {item!r}", file=sys.stderr)
            return 2
        settings[key.strip()] = value.strip()
    if args.console is not None:
        settings["console.enable"] = "true" if args.console else "false"
    if args.listen is not None and settings.get("listeners", "").strip():
        # The command line wins over a config file's listeners (a Kafka server.properties
        # names its own ports), as --set wins over the file.
        for key in ("listeners", "advertised.listeners"):
            if settings.pop(key, None):
                logging.getLogger("chronik.config").warning("--listen replaces %s", key)
    listen = args.listen or "127.0.0.1:9092"
    try:
        host, port = parse_listen(listen)
        broker = Broker(
            args.data_dir,
            host,
            port,
            settings,
            advertised_host=args.advertised_host,
            metrics_listen=args.metrics_listen,
            http_listen=args.http_listen,
            schema_registry_listen=args.schema_registry_listen,
        )
    except (ValueError, ConfigError) as exc:
        print(f"chronik: error: {exc}", file=sys.stderr)
        return 2
    try:
        asyncio.run(serve_until_signalled(broker))
    except OSError as exc:
        where = settings.get("listeners") or listen
        print(f"chronik: error: cannot serve on {where}: {exc}", file=sys.stderr)
        return 1
    except BrokerStartError as exc:
        print(f"chronik: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    logging.shutdown()
    return 0
