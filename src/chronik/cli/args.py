"""Argument parsing shared by every subcommand."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


class Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line on stderr, not a usage dump."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"chronik: error: {message} (see '{self.prog} --help')\n")
        raise SystemExit(2)


def add_bootstrap(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bootstrap-server",
        default=DEFAULT_BOOTSTRAP,
        metavar="HOST:PORT",
        help=f"broker to connect to (default {DEFAULT_BOOTSTRAP})",
    )
    parser.add_argument(
        "--command-config",
        default=None,
        metavar="FILE",
        help="client properties (security.protocol, sasl.*, ssl.*), as Kafka's tools take them",
    )
    parser.add_argument(
        "--connect-timeout",
        type=positive_float,
        default=5.0,
        metavar="SECONDS",
        help="give up when the broker does not answer within this time (default 5)",
    )


def key_value(text: str) -> tuple[str, str]:
    """Parse `key=value` (the value may itself contain '=')."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    return key, value


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0, got {value}")
    return value


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {value}")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0, got {text}")
    return value


def unescape(text: str) -> str:
    r"""Let separators like '\t' be typed on a shell command line."""
    return text.encode("utf-8").decode("unicode_escape") if "\\" in text else text
