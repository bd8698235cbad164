"""The schema registry as `chronik schemas` reaches it: confluent-kafka's
SchemaRegistryClient where it has the call, plain HTTP (urllib) where it does not (the
compatibility check's verbose messages), one set of settings for both: the URL, HTTP
Basic credentials (a SCRAM user's, on a secured broker) and the CA that signed an
https:// registry's certificate.

A refusal of the registry becomes one line, "<message> (error code N)" with Confluent's
code; a registry that cannot be reached, "cannot reach the schema registry at URL (why)".
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import ssl
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, TypeVar

from chronik.cli.args import positive_float
from chronik.cli.errors import CliError

if TYPE_CHECKING:
    from confluent_kafka.schema_registry import SchemaRegistryClient

DEFAULT_URL = "http://127.0.0.1:8081"
URL_ENV = "CHRONIK_SCHEMA_REGISTRY_URL"
PASSWORD_ENV = "CHRONIK_SCHEMA_REGISTRY_PASSWORD"
# After the connection is up, time for the answer: a write waits for the primary's fsync.
READ_TIMEOUT = 30.0
CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
# A larger answer than this is not a registry's: refuse it rather than hold it.
MAX_ANSWER_BYTES = 64 << 20
# A refusal is printed on one line: a registry's messages are short, a web page is not.
MAX_MESSAGE_CHARS = 2000

T = TypeVar("T")


def add_registry_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--registry-url",
        default=None,
        metavar="URL",
        help=f"the schema registry (default ${URL_ENV} or {DEFAULT_URL})",
    )
    parser.add_argument("--user", default=None, metavar="USER", help="HTTP Basic user")
    parser.add_argument(
        "--password",
        default=None,
        metavar="PASSWORD",
        help=f"HTTP Basic password (or ${PASSWORD_ENV}, which keeps it off the command line)",
    )
    parser.add_argument(
        "--ca-file",
        default=None,
        metavar="FILE",
        help="PEM file of the CA that signed an https:// registry's certificate",
    )
    parser.add_argument(
        "--connect-timeout",
        type=positive_float,
        default=5.0,
        metavar="SECONDS",
        help="give up when the registry does not accept a connection within this time (default 5)",
    )


@dataclass(frozen=True)
class RegistrySettings:
    url: str
    user: str | None = None
    password: str | None = None
    ca_file: str | None = None
    connect_timeout: float = 5.0

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> RegistrySettings:
        url = (args.registry_url or os.environ.get(URL_ENV) or DEFAULT_URL).rstrip("/")
        if not url.startswith(("http://", "https://")):
            raise CliError(f"--registry-url wants http://HOST:PORT or https://HOST:PORT: {url}", 2)
        password = args.password if args.password is not None else os.environ.get(PASSWORD_ENV)
        if (args.user is None) != (password is None):
            raise CliError(f"--user and --password (or ${PASSWORD_ENV}) go together", 2)
        if args.ca_file is not None and not os.path.isfile(args.ca_file):
            raise CliError(f"--ca-file {args.ca_file}: no such file", 2)
        return cls(url, args.user, password, args.ca_file, args.connect_timeout)


class Registry:
    """One registry, its client made on first use."""

    def __init__(self, settings: RegistrySettings) -> None:
        self.settings = settings

    @cached_property
    def tls(self) -> ssl.SSLContext:
        try:
            return ssl.create_default_context(cafile=self.settings.ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise CliError(f"--ca-file {self.settings.ca_file}: {exc}") from None

    @cached_property
    def client(self) -> SchemaRegistryClient:
        from confluent_kafka.schema_registry import SchemaRegistryClient

        s = self.settings
        conf: dict[str, Any] = {
            "url": s.url,
            "timeout": _httpx().Timeout(READ_TIMEOUT, connect=s.connect_timeout),
            # A command is run by a person or a script that retries on its own terms.
            "max.retries": 0,
        }
        if s.user is not None:
            conf["basic.auth.user.info"] = f"{s.user}:{s.password}"
        if s.ca_file is not None:
            self.tls  # noqa: B018 - a bad CA file is reported before the client trips on it
            conf["ssl.ca.location"] = s.ca_file
        try:
            return SchemaRegistryClient(conf)
        except ValueError as exc:
            raise CliError(f"--registry-url {s.url}: {exc}", 2) from None

    def call(self, operation: Callable[[SchemaRegistryClient], T]) -> T:
        """Run one SchemaRegistryClient call, its failures as CliErrors."""
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        httpx = _httpx()

        try:
            return operation(self.client)
        except SchemaRegistryError as exc:
            raise refusal(exc.http_status_code, exc.error_code, exc.error_message) from None
        except json.JSONDecodeError:
            raise not_a_registry() from None
        except KeyError as exc:
            raise CliError(
                f"the answer has no {exc}: is --registry-url a schema registry?"
            ) from None
        except httpx.TimeoutException:
            raise self.unreachable("no answer in time") from None
        except httpx.TransportError as exc:
            raise self.unreachable(str(exc) or type(exc).__name__) from None

    def http(self, method: str, path: str, body: Any = None) -> Any:
        """One request by plain HTTP (``path`` is quoted by the caller): its JSON answer."""
        s = self.settings
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(s.url + path, data=data, method=method)
        request.add_header("Accept", CONTENT_TYPE)
        if data is not None:
            request.add_header("Content-Type", CONTENT_TYPE)
        if s.user is not None:
            token = base64.b64encode(f"{s.user}:{s.password}".encode()).decode()
            request.add_header("Authorization", f"Basic {token}")
        context = self.tls if s.url.startswith("https://") else None
        try:
            with urllib.request.urlopen(
                request, timeout=max(READ_TIMEOUT, s.connect_timeout), context=context
            ) as response:
                return _decode(response.read(MAX_ANSWER_BYTES + 1))
        except urllib.error.HTTPError as exc:
            payload = exc.read(MAX_ANSWER_BYTES)
            try:
                doc = json.loads(payload)
                code, message = doc["error_code"], doc["message"]
            except (ValueError, KeyError, TypeError):
                code, message = -1, payload.decode(errors="replace").strip() or exc.reason
            raise refusal(exc.code, code, str(message)) from None
        except urllib.error.URLError as exc:
            raise self.unreachable(str(exc.reason)) from None
        except TimeoutError:
            raise self.unreachable("no answer in time") from None
        except OSError as exc:
            raise self.unreachable(exc.strerror or str(exc)) from None

    def unreachable(self, reason: str) -> CliError:
        return CliError(f"cannot reach the schema registry at {self.settings.url} ({reason})")

    def close(self) -> None:
        if "client" in self.__dict__:
            self.client.close()


def _httpx() -> Any:
    """The HTTP library SchemaRegistryClient was built with (httpx, or httpx2 in the
    confluent-kafka releases that moved to it): its exception and timeout types."""
    try:
        from confluent_kafka.schema_registry.common._httpx_compat import httpx
    except ImportError:
        import httpx
    return httpx


def refusal(status: int, code: int | None, message: str) -> CliError:
    """The registry's own error, as one line with Confluent's error code."""
    text = " ".join(str(message).split())
    if len(text) > MAX_MESSAGE_CHARS:
        text = text[:MAX_MESSAGE_CHARS] + "..."
    if code is None or code == -1:
        return CliError(f"{text} (HTTP status {status})")
    return CliError(f"{text} (error code {code})")


def _decode(payload: bytes) -> Any:
    if len(payload) > MAX_ANSWER_BYTES:
        raise CliError(f"the registry's answer is larger than {MAX_ANSWER_BYTES} bytes")
    try:
        return json.loads(payload)
    except ValueError:
        raise not_a_registry() from None


def not_a_registry() -> CliError:
    return CliError("the answer is not JSON: is --registry-url a schema registry?")
