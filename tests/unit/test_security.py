"""SCRAM against RFC 7677's example, credentials as Kafka stores them, the listener
settings, the credentials file, the SASL session's states and --command-config."""

from __future__ import annotations

import asyncio
import base64
import json
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chronik.security.client_settings import client_settings, jaas_credentials
from chronik.security.credentials import CredentialError, CredentialStore
from chronik.security.listeners import ListenerError, parse_listeners
from chronik.security.sasl import AuthenticationFailed, SaslSession, State
from chronik.security.scram import (
    ScramCredential,
    ScramError,
    ScramServer,
    check_password,
    from_salted_password,
    make_credential,
    salted_password,
)

# RFC 7677, section 3.
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_SERVER_FIRST = (
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
)
RFC_CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def rfc_server(password: str = "pencil") -> ScramServer:
    credential = make_credential("SCRAM-SHA-256", password, 4096, RFC_SALT)
    return ScramServer(
        "SCRAM-SHA-256", {"user": credential}.get, server_nonce=RFC_SERVER_NONCE
    )


def test_scram_sha_256_matches_rfc_7677() -> None:
    server = rfc_server()
    assert server.first(RFC_CLIENT_FIRST) == RFC_SERVER_FIRST
    assert server.final(RFC_CLIENT_FINAL) == RFC_SERVER_FINAL
    assert server.user == "user"


def test_scram_wrong_password_unknown_user_and_bad_nonce_fail() -> None:
    server = rfc_server("not-pencil")
    server.first(RFC_CLIENT_FIRST)
    with pytest.raises(ScramError, match="invalid credentials"):
        server.final(RFC_CLIENT_FINAL)
    unknown = ScramServer("SCRAM-SHA-256", {}.get, server_nonce=RFC_SERVER_NONCE)
    first = unknown.first(RFC_CLIENT_FIRST)
    # The unknown user is answered like a real one, and the same way each time.
    assert first.startswith(b"r=rOprNGfwEbeRWgbNEkqO%hvYDp") and b",i=4096" in first
    again = ScramServer("SCRAM-SHA-256", {}.get, server_nonce=RFC_SERVER_NONCE)
    assert again.first(RFC_CLIENT_FIRST) == first
    with pytest.raises(ScramError):
        unknown.final(RFC_CLIENT_FINAL)
    server = rfc_server()
    server.first(RFC_CLIENT_FIRST)
    with pytest.raises(ScramError, match="nonce"):
        server.final(RFC_CLIENT_FINAL.replace(b"r=rOpr", b"r=XXpr"))


@pytest.mark.parametrize(
    "message",
    [b"", b"\xff\xfe", b"p=tls-unique,,n=user,r=x", b"n,,r=abc", b"n,,n=user", b"n,,garbage",
     b"n,,n=user,r=x,tokenauth=true"],
)
def test_scram_malformed_client_first_is_an_error_not_a_crash(message: bytes) -> None:
    with pytest.raises(ScramError):
        rfc_server().first(message)


@given(st.binary(max_size=200), st.binary(max_size=300))
def test_scram_server_never_raises_anything_but_scram_error(first: bytes, final: bytes) -> None:
    server = rfc_server()
    try:
        server.first(first)
        server.final(final)
    except ScramError:
        pass


def test_credentials_as_kafka_writes_them() -> None:
    credential = make_credential("SCRAM-SHA-512", "secret", 4096, b"salt-bytes")
    text = credential.to_kafka()
    assert text.startswith("salt=" + base64.b64encode(b"salt-bytes").decode() + ",stored_key=")
    assert text.endswith(",iterations=4096")
    assert ScramCredential.from_kafka(text) == credential
    assert check_password("SCRAM-SHA-512", credential, b"secret")
    assert not check_password("SCRAM-SHA-512", credential, b"Secret")
    salted = salted_password("sha512", b"secret", b"salt-bytes", 4096)
    assert from_salted_password("SCRAM-SHA-512", salted, b"salt-bytes", 4096) == credential
    with pytest.raises(ValueError):
        ScramCredential.from_kafka("salt=!!,iterations=x")
    with pytest.raises(ValueError):
        make_credential("SCRAM-SHA-256", "x", iterations=100)


def test_credential_store_persists_and_deletes(tmp_path: Path) -> None:
    store = CredentialStore(tmp_path)
    store.upsert("alice", "SCRAM-SHA-256", make_credential("SCRAM-SHA-256", "a"))
    store.upsert("alice", "SCRAM-SHA-512", make_credential("SCRAM-SHA-512", "a"))
    store.upsert("bob", "SCRAM-SHA-256", make_credential("SCRAM-SHA-256", "b"))
    raw = json.loads((tmp_path / "security" / "users.json").read_text())
    assert raw["version"] == 1 and set(raw["users"]) == {"alice", "bob"}
    assert "a" not in json.dumps(raw["users"]["alice"]).split('"')  # no password
    assert (tmp_path / "security" / "users.json").stat().st_mode & 0o777 == 0o600
    again = CredentialStore(tmp_path)
    assert set(again.mechanisms("alice")) == {"SCRAM-SHA-256", "SCRAM-SHA-512"}
    assert again.delete("alice", "SCRAM-SHA-256")
    assert not again.delete("alice", "SCRAM-SHA-256")
    assert again.delete("bob")
    assert set(CredentialStore(tmp_path).users()) == {"alice"}
    (tmp_path / "security" / "users.json").write_text("{not json")
    with pytest.raises(CredentialError):
        CredentialStore(tmp_path)


def test_listeners_parse_as_kafka_reads_them() -> None:
    specs = parse_listeners(
        "PLAINTEXT://:9092,INTERNAL://127.0.0.1:9093,SASL_SSL://[::1]:9094",
        "INTERNAL://broker1.example:19093",
        "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
    )
    assert [(s.name, s.protocol, s.host, s.port) for s in specs] == [
        ("PLAINTEXT", "PLAINTEXT", "", 9092),
        ("INTERNAL", "SASL_PLAINTEXT", "127.0.0.1", 9093),
        ("SASL_SSL", "SASL_SSL", "::1", 9094),
    ]
    assert specs[0].advertised() == ("127.0.0.1", 9092)
    assert specs[1].advertised() == ("broker1.example", 19093)
    assert specs[1].sasl and not specs[1].tls and specs[2].sasl and specs[2].tls
    # A KRaft server.properties: the controller quorum's listener is not served.
    kraft = parse_listeners("PLAINTEXT://:9092,CONTROLLER://:9093", skip="CONTROLLER")
    assert [s.name for s in kraft] == ["PLAINTEXT"]


@pytest.mark.parametrize(
    ("listeners", "advertised", "mapping"),
    [
        ("", None, None),
        ("PLAINTEXT://127.0.0.1", None, None),
        ("PLAINTEXT://127.0.0.1:x", None, None),
        ("PLAINTEXT://127.0.0.1:70000", None, None),
        ("OTHER://127.0.0.1:1", None, None),
        ("PLAINTEXT://:1,PLAINTEXT://:2", None, None),
        ("PLAINTEXT://:1", "SSL://h:1", None),
        ("PLAINTEXT://:1", "PLAINTEXT://0.0.0.0:1", None),
        ("A://:1", None, "A:KERBEROS"),
    ],
)
def test_bad_listener_settings_are_errors(listeners, advertised, mapping) -> None:
    with pytest.raises(ListenerError):
        parse_listeners(listeners, advertised, mapping)


def test_sasl_session_states(tmp_path: Path) -> None:
    store = CredentialStore(tmp_path)
    store.upsert("alice", "SCRAM-SHA-256", make_credential("SCRAM-SHA-256", "pw"))
    session = SaslSession(("PLAIN", "SCRAM-SHA-256"), store)
    assert not session.handshake("SCRAM-SHA-512", 1)
    assert session.state is State.HANDSHAKE
    assert session.handshake("PLAIN", 1)
    assert asyncio.run(session.authenticate(b"\0alice\0pw")) == b""
    assert session.complete and session.user == "alice"
    for token in (b"\0alice\0wrong", b"\0nobody\0pw", b"alice\0", b"other\0alice\0pw", b"\0\0"):
        failing = SaslSession(("PLAIN",), store)
        failing.handshake("PLAIN", 1)
        with pytest.raises(AuthenticationFailed):
            asyncio.run(failing.authenticate(token))
        assert failing.state is State.FAILED
        with pytest.raises(AuthenticationFailed):
            asyncio.run(failing.authenticate(b"\0alice\0pw"))


def test_command_config_translates_kafka_client_properties() -> None:
    jaas = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
            'username="alice" password="p\\"w;x";')
    assert jaas_credentials(jaas) == ("alice", 'p\\"w;x')
    conf = client_settings({
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": 'x required username="u" password="p";',
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": "/ca.pem",
        "ssl.keystore.location": "/me.pem",
        "ssl.endpoint.identification.algorithm": "",
        "unknown.java.setting": "1",
    })
    assert conf == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "u",
        "sasl.password": "p",
        "ssl.ca.location": "/ca.pem",
        "ssl.certificate.location": "/me.pem",
        "ssl.key.location": "/me.pem",
        "ssl.endpoint.identification.algorithm": "none",
    }
    with pytest.raises(ValueError):
        client_settings({"ssl.truststore.type": "JKS", "ssl.truststore.location": "/x.jks"})
    with pytest.raises(ValueError):
        client_settings({"sasl.jaas.config": "x required;"})


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_client_and_server_agree(mechanism: str) -> None:
    from chronik.security.scram import ScramClient

    credential = make_credential(mechanism, "pa,ss=word")
    server = ScramServer(mechanism, {"we,ird=name": credential}.get)
    client = ScramClient(mechanism, "we,ird=name", "pa,ss=word")
    client.verify(server.final(client.final(server.first(client.first()))))
    assert server.user == "we,ird=name"
    liar = ScramClient(mechanism, "we,ird=name", "pa,ss=word")
    liar.final(ScramServer(mechanism, {}.get).first(liar.first()))
    with pytest.raises(ScramError):
        liar.verify(b"v=" + base64.b64encode(b"\0" * 32))


def test_principal_mapping_rules_as_kafka_applies_them() -> None:
    from chronik.security.principal import PrincipalMapper, PrincipalRuleError, parse_rules

    assert PrincipalMapper().from_subject("CN=alice,OU=eng,O=acme") == "User:CN=alice,OU=eng,O=acme"
    mapper = PrincipalMapper(
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,RULE:^CN=(.*?),OU=(.*?),O=.*$/$1@$2/L, DEFAULT"
    )
    assert mapper.from_subject("CN=kafka-svc,OU=ServiceUsers,O=acme") == "User:kafka-svc"
    assert mapper.from_subject("CN=Alice,OU=ENG,O=acme") == "User:alice@eng"
    assert mapper.from_subject("O=acme") == "User:O=acme"
    upper = PrincipalMapper("RULE:^CN=([^,]*).*$/$1/U")
    assert upper.from_subject("CN=bob,O=x") == "User:BOB"
    with pytest.raises(PrincipalRuleError):
        upper.from_subject("O=nothing")
    for bad in ("RULE:(/x/", "RULE:a/b", "NOPE"):
        with pytest.raises(PrincipalRuleError):
            parse_rules(bad)


def test_certificate_subject_named_as_java_names_it() -> None:
    from chronik.security.tls import subject_name

    peercert = {"subject": ((("countryName", "DE"),), (("organizationName", "acme, inc"),),
                            (("organizationalUnitName", "eng"),), (("commonName", "alice"),))}
    assert subject_name(peercert) == "CN=alice,OU=eng,O=acme\\, inc,C=DE"
    assert subject_name(None) is None


def test_credentials_file_on_a_full_disk_stays_as_it_was(tmp_path: Path, monkeypatch) -> None:
    import errno

    from chronik.storage import diskio

    store = CredentialStore(tmp_path)
    store.upsert("alice", "SCRAM-SHA-256", make_credential("SCRAM-SHA-256", "a"))
    before = (tmp_path / "security" / "users.json").read_bytes()

    def full(fd: int, data: bytes) -> None:
        os.write(fd, data[:10])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(diskio, "write_all", full)
    with pytest.raises(OSError):
        store.apply([("bob", "SCRAM-SHA-256", make_credential("SCRAM-SHA-256", "b")),
                     ("alice", "SCRAM-SHA-256", None)])
    assert (tmp_path / "security" / "users.json").read_bytes() == before
    assert sorted(p.name for p in (tmp_path / "security").iterdir()) == ["users.json"]
    assert set(store.users()) == {"alice"}
    assert set(CredentialStore(tmp_path).users()) == {"alice"}
