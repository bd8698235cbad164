"""The schema registry of a secured broker (SASL_SSL listener, SCRAM users, the ACL
authorizer) served over HTTPS with the broker's key store: every request needs a SCRAM
user's HTTP Basic credentials (else 401, error code 40101), and the ACLs on the topic
_schemas decide (else 403, error code 40301): DESCRIBE to read, look up and check, WRITE to
register and delete, ALTER_CONFIGS to change a config or a mode. Driven by confluent-kafka's
SchemaRegistryClient (basic.auth.user.info, ssl.ca.location), raw HTTPS and `chronik schemas`.
"""

from __future__ import annotations

import base64
import json
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient, SchemaRegistryError

from chronik.security.credentials import CredentialStore
from chronik.security.scram import make_credential
from conftest import BrokerProcess, free_port, wait_for_port

from .cli_support import chronik
from .registry_support import avro_record
from .tls_support import make_pki

USERS = {
    "admin": "admin-Pa55word",
    "reader": "reader-Secret-1",
    "writer": "writer-Secret-2",
    "operator": "operator-Secret-3",
    "nobody": "nobody-Secret-4",
}
# What each user may do on _schemas (admin is a super user).
GRANTS = {
    "reader": (AclOperation.DESCRIBE,),
    "writer": (AclOperation.WRITE,),  # WRITE implies DESCRIBE, as in Kafka
    "operator": (AclOperation.ALTER_CONFIGS,),
}
V1 = avro_record("Payment", ("amount", "long"))
V2 = avro_record("Payment", ("amount", "long"), ("currency", "string", "EUR"))
V3 = avro_record("Payment", ("amount", "long"), ("note", "string", ""))


@dataclass
class SecuredRegistry:
    broker: BrokerProcess
    url: str
    ca_file: Path

    def client(self, user: str | None = None, password: str | None = None) -> SchemaRegistryClient:
        conf: dict[str, Any] = {"url": self.url, "ssl.ca.location": str(self.ca_file)}
        if user is not None:
            conf["basic.auth.user.info"] = f"{user}:{password or USERS[user]}"
        return SchemaRegistryClient(conf)

    def https(
        self, method: str, path: str, body: Any = None, auth: tuple[str, str] | None = None
    ) -> tuple[int, Any, dict[str, str]]:
        """(status, JSON body, headers) of one raw HTTPS request."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method)
        if data is not None:
            request.add_header("Content-Type", "application/vnd.schemaregistry.v1+json")
        if auth is not None:
            token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
            request.add_header("Authorization", f"Basic {token}")
        context = ssl.create_default_context(cafile=str(self.ca_file))
        try:
            with urllib.request.urlopen(request, timeout=30, context=context) as response:
                return response.status, json.loads(response.read()), dict(response.headers)
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read()), dict(exc.headers)

    def cli(self, *args: str, user: str | None = None, env: dict[str, str] | None = None) -> Any:
        extra = ["--registry-url", self.url, "--ca-file", str(self.ca_file)]
        if user is not None:
            extra += ["--user", user, "--password", USERS[user]]
        return chronik("schemas", *args, *extra, env=env)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredRegistry]:
    tmp = tmp_path_factory.mktemp("registry-security")
    pki = make_pki(tmp / "pki")
    broker_pem = pki.issue("broker", "localhost", server=True)
    data = tmp / "data"
    store = CredentialStore(data)
    for user, password in USERS.items():
        store.upsert(user, "SCRAM-SHA-512", make_credential("SCRAM-SHA-512", password, 4096))
    registry_port = free_port()
    broker = BrokerProcess(data)
    broker.config.update(
        {
            "listeners": f"SASL_SSL://127.0.0.1:{broker.port}",
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(broker_pem),
            "authorizer.class.name": "chronik",
            "super.users": "User:admin",
            "connection.failed.authentication.delay.ms": "20",
            "schema.registry.listen": f"https://127.0.0.1:{registry_port}",
        }
    )
    broker.start()
    try:
        wait_for_port(registry_port, 30, proc=broker.proc)
        admin = AdminClient(
            {
                "bootstrap.servers": broker.bootstrap,
                "security.protocol": "SASL_SSL",
                "ssl.ca.location": str(pki.ca_file),
                "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.username": "admin",
                "sasl.password": USERS["admin"],
            }
        )
        bindings = [
            AclBinding(
                ResourceType.TOPIC,
                "_schemas",
                ResourcePatternType.LITERAL,
                f"User:{user}",
                "*",
                operation,
                AclPermissionType.ALLOW,
            )
            for user, operations in GRANTS.items()
            for operation in operations
        ]
        for future in admin.create_acls(bindings, request_timeout=15).values():
            future.result()
        yield SecuredRegistry(broker, f"https://127.0.0.1:{registry_port}", pki.ca_file)
    finally:
        broker.kill()
        log = broker.log_path.read_text(errors="replace")
        assert not [p for p in USERS.values() if p in log], "a password reached the log"


def refused(call: Callable[[], Any]) -> tuple[int, int]:
    """(HTTP status, Confluent error code) of a call the registry must refuse."""
    with pytest.raises(SchemaRegistryError) as caught:
        call()
    return caught.value.http_status_code, caught.value.error_code


def test_credentials_are_required(secured: SecuredRegistry) -> None:
    for auth in (None, ("reader", "wrong-password"), ("mallory", "pw")):
        status, body, headers = secured.https("GET", "/subjects", auth=auth)
        assert (status, body["error_code"]) == (401, 40101), (auth, body)
        assert isinstance(body["message"], str) and body["message"]
        assert headers["WWW-Authenticate"].startswith("Basic")
    assert refused(lambda: secured.client().get_subjects()) == (401, 40101)
    assert refused(lambda: secured.client("reader", "nope").get_subjects()) == (401, 40101)
    status, body, _ = secured.https("GET", "/subjects", auth=("reader", USERS["reader"]))
    assert status == 200 and isinstance(body, list)
    # A user the ACLs give nothing: authenticated, then forbidden.
    status, body, _ = secured.https("GET", "/subjects", auth=("nobody", USERS["nobody"]))
    assert (status, body["error_code"]) == (403, 40301), body
    assert refused(lambda: secured.client("nobody").get_schema_types()) == (403, 40301)


def test_acls_on_the_schemas_topic(secured: SecuredRegistry) -> None:
    subject = f"payments-{time.monotonic_ns()}-value"
    admin, reader = secured.client("admin"), secured.client("reader")
    writer, operator = secured.client("writer"), secured.client("operator")
    first = admin.register_schema(subject, Schema(V1, "AVRO"))

    # DESCRIBE: reads, lookups, compatibility checks; nothing that writes.
    assert subject in reader.get_subjects()
    assert reader.get_latest_version(subject).schema_id == first
    assert reader.lookup_schema(subject, Schema(V1, "AVRO")).version == 1
    assert reader.test_compatibility(subject, Schema(V2, "AVRO"))
    assert reader.get_compatibility() == "BACKWARD"
    assert refused(lambda: reader.register_schema(subject, Schema(V2, "AVRO"))) == (403, 40301)
    assert refused(lambda: reader.delete_version(subject, 1)) == (403, 40301)
    assert refused(lambda: reader.set_compatibility(subject, "NONE")) == (403, 40301)
    assert refused(lambda: reader.update_mode(subject, "READONLY")) == (403, 40301)

    # WRITE: register and delete (and, implied, read); not configs or modes.
    second = writer.register_schema(subject, Schema(V2, "AVRO"))
    assert writer.get_versions(subject) == [1, 2]
    assert refused(lambda: writer.set_compatibility(subject, "NONE")) == (403, 40301)
    assert refused(lambda: writer.update_global_mode("READONLY")) == (403, 40301)

    # ALTER_CONFIGS: configs and modes only.
    assert operator.set_compatibility(subject, "NONE")["compatibility"] == "NONE"
    assert operator.update_mode(subject, "READONLY") == "READONLY"
    assert refused(lambda: writer.register_schema(subject, Schema(V3, "AVRO")))[0] == 422
    assert operator.delete_mode(subject) == "READONLY"
    assert refused(lambda: operator.register_schema(subject, Schema(V3, "AVRO"))) == (403, 40301)
    assert refused(lambda: operator.get_subjects()) == (403, 40301)

    # Nothing refused was done: the versions and the level are what the allowed calls made.
    assert admin.get_versions(subject) == [1, 2]
    assert admin.get_latest_version(subject).schema_id == second
    assert admin.get_compatibility(subject) == "NONE"
    assert writer.delete_version(subject, 2) == 2
    assert admin.get_versions(subject) == [1]


def test_cli_with_credentials_and_ca_file(secured: SecuredRegistry, tmp_path: Path) -> None:
    subject = f"cli-{time.monotonic_ns()}-value"
    schema = tmp_path / "payment.avsc"
    schema.write_text(V1)
    newer = tmp_path / "payment-v2.avsc"
    newer.write_text(V2)

    done = secured.cli("register", subject, str(schema), user="writer")
    assert done.returncode == 0, done.stderr
    schema_id = int(done.stdout)
    done = secured.cli("list", user="reader")
    assert done.returncode == 0 and subject in done.lines, done.stderr
    done = secured.cli("show", subject, user="reader")
    assert done.returncode == 0 and f"id:         {schema_id}" in done.lines, done.stderr
    done = secured.cli("check", subject, str(newer), user="reader")
    assert (done.returncode, done.stdout) == (0, "compatible\n"), done.stderr
    done = secured.cli("config", subject, "--set", "FULL", user="operator")
    assert done.returncode == 0, done.stderr
    assert secured.client("admin").get_compatibility(subject) == "FULL"
    # The password may come from the environment instead of the command line.
    done = chronik(
        "schemas", "list", "--registry-url", secured.url, "--ca-file", str(secured.ca_file),
        "--user", "reader", env={"CHRONIK_SCHEMA_REGISTRY_PASSWORD": USERS["reader"]},
    )  # fmt: skip
    assert done.returncode == 0 and subject in done.lines, done.stderr

    # Refusals: one line with Confluent's code, exit 1.
    for args, user, code in (
        (("list",), None, 40101),
        (("register", subject, str(newer)), "reader", 40301),
        (("check", subject, str(newer)), "nobody", 40301),
        (("config", subject, "--set", "NONE"), "writer", 40301),
        (("delete", subject), "operator", 40301),
    ):
        done = secured.cli(*args, user=user)
        assert done.returncode == 1, (args, done.stdout)
        assert len(done.error_lines) == 1, done.stderr
        assert done.error_lines[0].startswith("chronik: error: ")
        assert done.error_lines[0].endswith(f"(error code {code})"), done.stderr
    assert secured.client("admin").get_versions(subject) == [1]

    # TLS: without the CA the certificate is not trusted; plain HTTP gets no answer.
    done = chronik(
        "schemas", "list", "--registry-url", secured.url, "--user", "reader", "--password",
        USERS["reader"],
    )  # fmt: skip
    assert done.returncode == 1 and len(done.error_lines) == 1, done.stderr
    assert "certificate" in done.stderr.lower()
    plain = secured.url.replace("https://", "http://")
    done = chronik("schemas", "list", "--registry-url", plain, "--user", "reader",
                   "--password", USERS["reader"])  # fmt: skip
    assert done.returncode == 1 and len(done.error_lines) == 1, done.stderr
    assert done.error_lines[0].startswith(
        f"chronik: error: cannot reach the schema registry at {plain}"
    )
