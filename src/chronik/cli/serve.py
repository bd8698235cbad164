"""`chronik serve`: run a broker until SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", default="./chronik-data", help="where the log lives")
    parser.add_argument("--listen", default="127.0.0.1:9092", help="HOST:PORT to listen on")
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
    try:
        host, port = parse_listen(args.listen)
        broker = Broker(
            args.data_dir,
            host,
            port,
            settings,
            advertised_host=args.advertised_host,
            metrics_listen=args.metrics_listen,
        )
    except (ValueError, ConfigError) as exc:
        print(f"chronik: error: {exc}", file=sys.stderr)
        return 2
    try:
        asyncio.run(serve_until_signalled(broker))
    except OSError as exc:
        print(f"chronik: error: cannot serve on {args.listen}: {exc}", file=sys.stderr)
        return 1
    except BrokerStartError as exc:
        print(f"chronik: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    logging.shutdown()
    return 0
