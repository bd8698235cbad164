"""`chronik schemas ...` run as a user runs it, against an embedded broker serving the
schema registry; what it did is read back with confluent-kafka's SchemaRegistryClient."""

from __future__ import annotations

import functools
import http.server
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from chronik.broker.embedded import EmbeddedBroker

from .cli_support import chronik, free_port, ok, unique
from .registry_support import avro_record

USER_V1 = avro_record("User", ("name", "string"))
USER_V2 = avro_record("User", ("name", "string"), ("age", "int", 0))
USER_BREAKING = avro_record("User", ("name", "string"), ("email", "string"))
MONEY = 'syntax = "proto3";\npackage acme;\n\nmessage Money {\n  int64 cents = 1;\n}\n'
ORDER = (
    'syntax = "proto3";\npackage acme;\n\nimport "money.proto";\n\n'
    "message Order {\n  string id = 1;\n  acme.Money total = 2;\n}\n"
)
EVENT_JSON = json.dumps(
    {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}
)


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    embedded = EmbeddedBroker(
        tmp_path_factory.mktemp("cli-schemas") / "data",
        config={"schema.registry.listen": "127.0.0.1:0"},
    )
    embedded.start()
    try:
        assert embedded.broker is not None
        yield f"http://127.0.0.1:{embedded.broker.registry_port}"
    finally:
        embedded.close()


@pytest.fixture
def files(tmp_path: Path) -> Path:
    for name, text in (
        ("user-v1.avsc", USER_V1),
        ("user-v2.avsc", USER_V2),
        ("user-breaking.avsc", USER_BREAKING),
        ("money.proto", MONEY),
        ("order.proto", ORDER),
        ("event.json", EVENT_JSON),
        ("user.txt", USER_V1),
    ):
        (tmp_path / name).write_text(text)
    return tmp_path


def sr(*args: str, url: str) -> list[str]:
    """Run a schemas command that must succeed; its stdout lines."""
    return ok("schemas", *args, "--registry-url", url).lines


def fails(*args: str, url: str, code: int = 1) -> str:
    """Run a schemas command that must fail with ``code``: its one stderr line."""
    done = chronik("schemas", *args, "--registry-url", url)
    assert done.returncode == code, (done.stdout, done.stderr)
    assert len(done.error_lines) == 1, done.stderr
    assert done.error_lines[0].startswith("chronik: error: ")
    return done.error_lines[0]


def test_register_list_and_show(url: str, files: Path) -> None:
    subject = unique("users-value")
    first = sr("register", subject, str(files / "user-v1.avsc"), url=url)
    assert len(first) == 1 and first[0].isdigit()
    schema_id = int(first[0])
    # The same schema again: the same id, no new version.
    assert sr("register", subject, str(files / "user-v1.avsc"), url=url) == [str(schema_id)]
    second = int(sr("register", subject, str(files / "user-v2.avsc"), url=url)[0])
    assert second != schema_id
    client = SchemaRegistryClient({"url": url})
    assert client.get_versions(subject) == [1, 2]
    assert client.get_latest_version(subject).schema_id == second

    assert subject in sr("list", url=url)
    assert sr("list", "--prefix", subject[:-2], url=url) == [subject]
    assert sr("list", "--prefix", "no-such-prefix", url=url) == []

    latest = sr("show", subject, url=url)
    assert latest[:5] == [
        f"subject:    {subject}",
        "version:    2",
        f"id:         {second}",
        "type:       AVRO",
        "references: (none)",
    ]
    assert latest[5] == "schema:"
    # Pretty-printed, and the same schema.
    assert json.loads("\n".join(latest[6:])) == json.loads(USER_V2)
    assert latest[6:8] == ["{", '  "type": "record",']
    assert sr("show", subject, "--version", "1", url=url)[2] == f"id:         {schema_id}"
    by_id = sr("show", "--id", str(schema_id), url=url)
    assert by_id[:3] == [
        f"id:         {schema_id}",
        "type:       AVRO",
        f"used by:    {subject} v1",
    ]
    assert json.loads("\n".join(by_id[5:])) == json.loads(USER_V1)


def test_types_by_extension_and_references(url: str, files: Path) -> None:
    money, order, event = unique("money"), unique("order-value"), unique("event-value")
    money_id = int(sr("register", money, str(files / "money.proto"), url=url)[0])
    order_id = int(
        sr(
            "register",
            order,
            str(files / "order.proto"),
            "--reference",
            f"money.proto={money}:1",
            url=url,
        )[0]
    )
    client = SchemaRegistryClient({"url": url})
    stored = client.get_schema(order_id)
    assert stored.schema_type == "PROTOBUF"
    assert [(r.name, r.subject, r.version) for r in stored.references] == [
        ("money.proto", money, 1)
    ]
    assert client.get_schema(money_id).schema_type == "PROTOBUF"
    shown = sr("show", order, url=url)
    assert "type:       PROTOBUF" in shown
    assert shown[shown.index("references:") + 1] == f"  money.proto = {money}:1"
    assert "message Order {" in shown
    sr("register", event, str(files / "event.json"), url=url)
    assert client.get_latest_version(event).schema.schema_type == "JSON"
    # An extension that says nothing needs --type; with it, the file registers.
    other = unique("txt-value")
    error = fails("register", other, str(files / "user.txt"), url=url, code=2)
    assert "--type" in error
    sr("register", other, str(files / "user.txt"), "--type", "avro", url=url)
    assert client.get_latest_version(other).schema.schema_type == "AVRO"
    # stdin as the file.
    stdin_subject = unique("stdin-value")
    done = chronik(
        "schemas",
        "register",
        stdin_subject,
        "-",
        "--type",
        "AVRO",
        "--registry-url",
        url,
        input=USER_V2,
    )
    assert done.returncode == 0, done.stderr
    assert client.get_latest_version(stdin_subject).schema_id == int(done.stdout)


def test_check_says_compatible_or_why_not(url: str, files: Path) -> None:
    subject = unique("checked-value")
    sr("register", subject, str(files / "user-v1.avsc"), url=url)
    done = chronik("schemas", "check", subject, str(files / "user-v2.avsc"), "--registry-url", url)
    assert (done.returncode, done.stdout) == (0, "compatible\n"), done.stderr
    done = chronik(
        "schemas", "check", subject, str(files / "user-breaking.avsc"), "--registry-url", url
    )
    assert done.returncode == 1 and done.stderr == ""
    assert done.lines[0] == "incompatible"
    assert len(done.lines) >= 2 and "email" in "\n".join(done.lines[1:])
    client = SchemaRegistryClient({"url": url})
    assert not client.test_compatibility(subject, Schema(USER_BREAKING, "AVRO"))
    # Against a named version, and a version that does not exist.
    done = chronik(
        "schemas",
        "check",
        subject,
        str(files / "user-v2.avsc"),
        "--version",
        "1",
        "--registry-url",
        url,
    )
    assert done.returncode == 0 and done.stdout == "compatible\n", done.stderr
    error = fails("check", subject, str(files / "user-v2.avsc"), "--version", "7", url=url)
    assert error.endswith("(error code 40402)"), error
    # Nothing was registered by checking.
    assert client.get_versions(subject) == [1]


def test_config_and_mode(url: str, files: Path) -> None:
    subject = unique("configured-value")
    sr("register", subject, str(files / "user-v1.avsc"), url=url)
    client = SchemaRegistryClient({"url": url})
    assert sr("config", url=url) == ["BACKWARD"]
    assert sr("config", subject, url=url) == [f"BACKWARD (global; '{subject}' has none of its own)"]
    assert sr("config", subject, "--set", "none", url=url) == [
        f"subject '{subject}': compatibility NONE"
    ]
    assert client.get_compatibility(subject) == "NONE"
    assert sr("config", subject, url=url) == ["NONE"]
    # NONE lets the breaking change in.
    sr("register", subject, str(files / "user-breaking.avsc"), url=url)
    lines = sr("config", subject, "--delete", url=url)
    assert "removed (was NONE)" in lines[0]
    assert sr("config", subject, url=url)[0].startswith("BACKWARD (global")
    error = fails("config", subject, "--set", "SIDEWAYS", url=url, code=2)
    assert "SIDEWAYS" in error

    assert sr("mode", url=url) == ["READWRITE"]
    assert sr("mode", subject, "--set", "readonly", url=url) == [
        f"subject '{subject}': mode READONLY"
    ]
    assert client.get_mode(subject) == "READONLY"
    error = fails("register", subject, str(files / "user-v2.avsc"), url=url)
    assert "read-only" in error and error.endswith("(error code 42205)"), error
    assert "removed (was READONLY)" in sr("mode", subject, "--delete", url=url)[0]
    assert sr("mode", subject, url=url) == [f"READWRITE (global; '{subject}' has none of its own)"]
    assert "global mode cannot be deleted" in fails("mode", "--delete", url=url, code=2)
    # IMPORT where schemas exist needs --force; the registry says so.
    error = fails("mode", subject, "--set", "IMPORT", url=url)
    assert error.endswith("(error code 42205)"), error
    assert sr("mode", subject, "--set", "IMPORT", "--force", url=url) == [
        f"subject '{subject}': mode IMPORT"
    ]
    sr("mode", subject, "--delete", url=url)


def test_delete_soft_then_permanent(url: str, files: Path) -> None:
    subject = unique("deleted-value")
    sr("register", subject, str(files / "user-v1.avsc"), url=url)
    sr("register", subject, str(files / "user-v2.avsc"), url=url)
    assert sr("delete", subject, "--version", "1", url=url) == [
        f"deleted version 1 of subject '{subject}'"
    ]
    client = SchemaRegistryClient({"url": url})
    assert client.get_versions(subject) == [2]
    # A hard delete must follow a soft one (Confluent's rule, its code).
    error = fails("delete", subject, "--permanent", url=url)
    assert error.endswith("(error code 40405)"), error
    assert sr("delete", subject, url=url) == [f"deleted subject '{subject}': versions 2"]
    assert subject not in sr("list", url=url)
    assert f"{subject}  (deleted)" in sr("list", "--deleted", url=url)
    # confluent-kafka's client asks for deleted_only (Confluent's name is deletedOnly).
    assert subject in client.get_subjects(deleted_only=True)
    assert subject not in client.get_subjects()
    assert client.get_versions(subject, deleted_only=True) == [1, 2]
    assert sr("delete", subject, "--permanent", url=url) == [
        f"permanently deleted subject '{subject}': versions 1, 2"
    ]
    assert not any(subject in line for line in sr("list", "--deleted", url=url))
    error = fails("show", subject, url=url)
    assert error == f"chronik: error: Subject '{subject}' not found. (error code 40401)"


def test_errors_are_one_line(url: str, files: Path, tmp_path: Path) -> None:
    assert fails("show", "--id", "99999", url=url).endswith("(error code 40403)")
    bad = tmp_path / "bad.avsc"
    bad.write_text('{"type": "record", "name": "X", "fields": [{"name": "a"}]}')
    error = fails("register", unique("bad-value"), str(bad), url=url)
    assert error.endswith("(error code 42201)"), error
    assert "cannot read" in fails("register", "s", str(tmp_path / "missing.avsc"), url=url)
    empty = tmp_path / "empty.avsc"
    empty.write_text("\n")
    assert "is empty" in fails("register", "s", str(empty), url=url)
    binary = tmp_path / "binary.avsc"
    binary.write_bytes(b"\xff\xfe\x00")
    assert "not UTF-8" in fails("register", "s", str(binary), url=url)
    # Usage mistakes: exit 2, before anything is sent.
    fails("register", "s", str(files / "user-v1.avsc"), "--reference", "nocolon", url=url, code=2)
    fails("show", url=url, code=2)
    fails("show", "s", "--id", "1", url=url, code=2)
    fails("show", "s", "--version", "0", url=url, code=2)
    fails("show", "--id", "1", "--version", "2", url=url, code=2)
    fails("list", "--user", "alice", url=url, code=2)
    fails("list", url="ftp://127.0.0.1:1", code=2)
    # Nothing listening: one line naming the URL, quickly (no retry loop).
    dead = f"http://127.0.0.1:{free_port()}"
    for args in (("list",), ("check", "s", str(files / "user-v1.avsc"))):
        started = time.monotonic()
        error = fails(*args, url=dead)
        assert error.startswith(f"chronik: error: cannot reach the schema registry at {dead} ")
        assert time.monotonic() - started < 10
    # Something that is not a registry.
    error = fails("check", "s", str(files / "user-v1.avsc"), url=url + "/nope")
    assert "404" in error


def test_registry_url_from_the_environment(url: str, files: Path) -> None:
    subject = unique("env-value")
    done = chronik(
        "schemas",
        "register",
        subject,
        str(files / "user-v1.avsc"),
        env={"CHRONIK_SCHEMA_REGISTRY_URL": url},
    )
    assert done.returncode == 0, done.stderr
    done = chronik("schemas", "list", env={"CHRONIK_SCHEMA_REGISTRY_URL": url})
    assert subject in done.lines
    # --registry-url wins over the environment.
    done = chronik(
        "schemas",
        "list",
        "--registry-url",
        url,
        env={"CHRONIK_SCHEMA_REGISTRY_URL": "http://127.0.0.1:1"},
    )
    assert done.returncode == 0 and subject in done.lines


def test_something_that_is_not_a_registry(tmp_path: Path, files: Path) -> None:
    """A web server that is not a registry: an HTML 404 and a 200 that is not JSON both
    end in one line, never a traceback."""
    (tmp_path / "subjects").write_text("<html>a page, not a registry</html>\n")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        web = f"http://127.0.0.1:{server.server_address[1]}"
        assert "is --registry-url a schema registry?" in fails("list", url=web)
        error = fails("show", "x", url=web)
        assert error.endswith("(HTTP status 404)"), error
        error = fails("check", "x", str(files / "user-v1.avsc"), url=web)
        assert "(HTTP status 501)" in error or "(HTTP status 405)" in error, error
    finally:
        server.shutdown()
        server.server_close()
