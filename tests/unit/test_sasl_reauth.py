"""The SASL session's re-authentication states (KIP-368) and the
connections.max.reauth.ms settings, without a broker."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from chronik.security.broker_security import BrokerSecurity
from chronik.security.credentials import CredentialStore
from chronik.security.listeners import ListenerError
from chronik.security.sasl import AuthenticationFailed, SaslSession, State
from chronik.security.scram import make_credential


def store(tmp_path: Path) -> CredentialStore:
    credentials = CredentialStore(tmp_path)
    for user in ("alice", "bob"):
        credentials.upsert(user, "SCRAM-SHA-256", make_credential("SCRAM-SHA-256", user + "-pw"))
    return credentials


def login(session: SaslSession, user: str, mechanism: str = "PLAIN") -> None:
    assert session.handshake(mechanism, 1)
    asyncio.run(session.authenticate(f"\0{user}\0{user}-pw".encode()))


def test_a_session_without_a_lifetime_never_expires_nor_reauthenticates(tmp_path: Path) -> None:
    session = SaslSession(("PLAIN",), store(tmp_path))
    login(session, "alice")
    assert session.complete and session.lifetime_ms == 0 and session.expires_at is None
    assert not session.expired(float("inf"))
    assert not session.begin_reauthentication()
    assert session.state is State.COMPLETE


def test_reauthentication_renews_the_lifetime(tmp_path: Path) -> None:
    session = SaslSession(("PLAIN", "SCRAM-SHA-256"), store(tmp_path), {"PLAIN": 1500})
    login(session, "alice")
    assert session.lifetime_ms == 1500 and not session.reauthentication
    first = session.expires_at
    assert first is not None
    assert session.expired(first + 0.001) and not session.expired(first)
    assert session.begin_reauthentication(first + 5)
    assert session.authenticated and session.user == "alice"  # kept meanwhile
    login(session, "alice")
    assert session.complete and session.reauthentication
    assert session.expires_at is not None and session.expires_at > first
    # At most one re-authentication a second, counted from the last one's start.
    assert not session.begin_reauthentication(first + 5.5)
    assert session.begin_reauthentication(first + 6.0)


def test_reauthentication_cannot_change_the_user_or_the_mechanism(tmp_path: Path) -> None:
    credentials = store(tmp_path)
    session = SaslSession(("PLAIN", "SCRAM-SHA-256"), credentials, {"PLAIN": 1000})
    login(session, "alice")
    assert session.begin_reauthentication()
    with pytest.raises(AuthenticationFailed, match="from User.alice: User.bob"):
        login(session, "bob")
    assert session.state is State.FAILED and not session.authenticated

    session = SaslSession(("PLAIN", "SCRAM-SHA-256"), credentials, {"PLAIN": 1000})
    login(session, "alice")
    assert session.begin_reauthentication()
    assert session.handshake("SCRAM-SHA-256", 1)  # answered, as Kafka does
    with pytest.raises(AuthenticationFailed, match="re-authentication of mechanism 'PLAIN'"):
        asyncio.run(session.authenticate(b"n,,n=alice,r=abc"))
    assert session.state is State.FAILED

    session = SaslSession(("PLAIN",), credentials, {"PLAIN": 1000})
    login(session, "alice")
    assert session.begin_reauthentication()
    assert not session.handshake("GSSAPI", 1)
    assert session.state is State.FAILED


def test_reauthentication_reads_the_credentials_again(tmp_path: Path) -> None:
    credentials = store(tmp_path)
    session = SaslSession(("PLAIN",), credentials, {"PLAIN": 1000})
    login(session, "alice")
    credentials.delete("alice", "SCRAM-SHA-256")
    assert session.begin_reauthentication()
    with pytest.raises(AuthenticationFailed, match="during re-authentication"):
        login(session, "alice")


LISTENERS = {"listeners": "PLAINTEXT://127.0.0.1:0,CLIENTS://127.0.0.1:0,INTERNAL://:0",
             "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CLIENTS:SASL_PLAINTEXT,"
                                               "INTERNAL:SASL_PLAINTEXT",
             "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512"}


def test_lifetimes_from_the_settings(tmp_path: Path) -> None:
    def lifetimes(listener: str, **values: str) -> dict[str, int]:
        security = BrokerSecurity({**LISTENERS, **values}, tmp_path, "127.0.0.1", 0)
        return security.session_lifetimes(listener)

    assert lifetimes("CLIENTS") == {"PLAIN": 0, "SCRAM-SHA-512": 0}
    values = {"connections.max.reauth.ms": "60000",
              "listener.name.internal.scram-sha-512.connections.max.reauth.ms": "0"}
    assert lifetimes("CLIENTS", **values) == {"PLAIN": 60000, "SCRAM-SHA-512": 60000}
    assert lifetimes("INTERNAL", **values) == {"PLAIN": 60000, "SCRAM-SHA-512": 0}
    for bad in ("-1", "soon"):
        with pytest.raises(ListenerError, match="connections.max.reauth.ms"):
            lifetimes("CLIENTS", **{"connections.max.reauth.ms": bad})
