"""Kafka's JAAS form for inter-broker credentials, the SASL client exchange against the
broker's own SASL server, and BrokerSecurity's settings for connecting to other brokers."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from chronik.security.broker_security import BrokerSecurity
from chronik.security.credentials import CredentialStore
from chronik.security.listeners import ListenerError
from chronik.security.sasl import SaslSession
from chronik.security.sasl_client import (
    AuthenticationError,
    Credentials,
    JaasError,
    exchange,
    jaas_credentials,
    parse_jaas,
)
from chronik.security.scram import make_credential

SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"


def test_jaas_forms() -> None:
    entry = parse_jaas(f'{SCRAM} required username="broker" password="se;c\\"ret";')
    assert entry.login_module == SCRAM and entry.flag == "required"
    assert entry.options == {"username": "broker", "password": 'se;c"ret'}
    # Bare values, spaces and line breaks anywhere between the parts.
    text = f"\n  {PLAIN}   REQUIRED\n username=broker\n password = 'p'  ;  "
    assert jaas_credentials(text, "PLAIN") == Credentials("broker", "'p'")
    assert "secret" not in repr(jaas_credentials(f'{SCRAM} required username="b" '
                                                 'password="secret";', "SCRAM-SHA-256"))


@pytest.mark.parametrize("text", [
    "",
    f"{SCRAM}",
    f'{SCRAM} maybe username="b" password="hidden";',
    f'{SCRAM} required username="b" password="hidden"',
    f'{SCRAM} required username="b" password="hidden;',
    f'{SCRAM} required username="b" password="hidden"; {PLAIN} required;',
    f'{SCRAM} required username="b" password hidden;',
])
def test_unreadable_jaas(text: str) -> None:
    with pytest.raises(JaasError) as info:
        jaas_credentials(text, "SCRAM-SHA-512")
    assert "hidden" not in str(info.value)


def test_jaas_needs_the_mechanisms_module_and_both_options() -> None:
    with pytest.raises(JaasError, match="ScramLoginModule"):
        jaas_credentials(f'{PLAIN} required username="b" password="p";', "SCRAM-SHA-512")
    with pytest.raises(JaasError, match="username and password"):
        jaas_credentials(f'{SCRAM} required username="b";', "SCRAM-SHA-512")


def _drive(session: SaslSession, mechanism: str, credentials: Credentials) -> None:
    """The client's exchange against the broker's SaslSession, with the wire bodies."""
    async def go() -> None:
        steps = exchange(mechanism, credentials)
        api_key, _, body = next(steps)
        assert api_key == 17
        name = body[2:].decode()
        assert session.handshake(name, 1)
        answer = b"\x00\x00" + body[:2] + body[2:]
        try:
            api_key, _, body = steps.send(answer)
            while True:
                assert api_key == 36
                token = body[4:]
                try:
                    reply = await session.authenticate(token)
                    answer = b"\x00\x00" + b"\xff\xff" + len(reply).to_bytes(4, "big") + reply
                except Exception as exc:  # noqa: BLE001 - the broker's refusal
                    message = str(exc).encode()
                    answer = (b"\x00\x3a" + len(message).to_bytes(2, "big") + message
                              + b"\x00\x00\x00\x00")
                api_key, _, body = steps.send(answer)
        except StopIteration:
            return

    asyncio.run(go())


def test_sasl_client_against_the_broker(tmp_path: Path) -> None:
    store = CredentialStore(tmp_path)
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        store.upsert("broker", mechanism, make_credential(mechanism, "broker-secret"))
    mechanisms = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
    for mechanism in mechanisms:
        _drive(SaslSession(mechanisms, store), mechanism, Credentials("broker", "broker-secret"))
        with pytest.raises(AuthenticationError, match="invalid credentials"):
            _drive(SaslSession(mechanisms, store), mechanism, Credentials("broker", "wrong"))


LISTENERS = {
    "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
    "inter.broker.listener.name": "SASL_PLAINTEXT",
    "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
}


def security(tmp_path: Path, clustered: bool = True, **values: str) -> BrokerSecurity:
    return BrokerSecurity({**LISTENERS, **values}, tmp_path, "127.0.0.1", 0,
                          clustered=clustered)


def test_client_security_from_kafka_settings(tmp_path: Path) -> None:
    jaas = f'{SCRAM} required username="broker" password="broker-secret";'
    sec = security(tmp_path, **{"listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config":
                                jaas, "sasl.jaas.config": "not read"})
    assert sec.client is not None
    assert (sec.client.protocol, sec.client.mechanism) == ("SASL_PLAINTEXT", "SCRAM-SHA-512")
    assert sec.client.credentials == Credentials("broker", "broker-secret")
    assert sec.client.tls is None
    # sasl.jaas.config when there is no listener's own.
    sec = security(tmp_path, **{"sasl.jaas.config": jaas})
    assert sec.client is not None and sec.client.credentials is not None
    # A single node never connects to another broker: nothing is asked of it.
    assert security(tmp_path, clustered=False).client is None
    # PLAINTEXT between brokers: no TLS, no SASL.
    plain = security(tmp_path, **{"inter.broker.listener.name": "PLAINTEXT"})
    assert plain.client is not None and plain.client.credentials is None


def test_client_security_errors(tmp_path: Path) -> None:
    with pytest.raises(ListenerError, match=r"listener\.name\.sasl_plaintext\.scram-sha-512"):
        security(tmp_path)
    with pytest.raises(ListenerError, match="sasl.mechanism.inter.broker.protocol is not set"):
        security(tmp_path, **{"sasl.mechanism.inter.broker.protocol": ""})
    with pytest.raises(ListenerError, match="not in sasl.enabled.mechanisms"):
        security(tmp_path, **{"sasl.enabled.mechanisms": "PLAIN"})
    with pytest.raises(ListenerError, match="not both"):
        security(tmp_path, **{"security.inter.broker.protocol": "SASL_PLAINTEXT"})
    sec = security(tmp_path, **{
        "inter.broker.listener.name": "",
        "security.inter.broker.protocol": "SASL_PLAINTEXT",
        "sasl.jaas.config": f'{SCRAM} required username="b" password="p";',
    })
    assert sec.inter_broker.name == "SASL_PLAINTEXT"
