"""The bank-account domain: its events, how they fold into an account, and a generator.

Events are Avro records ``bank.AccountEvent`` (schemas/account_event_v*.avsc) keyed by
account id, handed to the fold decoded, as dicts:
``{"event_id": "...", "type": "AccountOpened" | "MoneyDeposited" | "MoneyWithdrawn" |
"AccountClosed", "account_id": "acc-7", "at": <epoch ms>, "owner": "..." (opened),
"amount": <cents> (deposit, withdrawal), "channel": "branch" | "online" | "atm" | "teller"}``.
The read model is JSON: the projection writes each account's state as a JSON document.
"""

from __future__ import annotations

import random
import uuid
from datetime import UTC, datetime
from typing import Any

from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

EVENT_TYPES = ("AccountOpened", "MoneyDeposited", "MoneyWithdrawn", "AccountClosed")

READ_MODEL_SCHEMA = StructType([
    StructField("account_id", StringType()),
    StructField("owner", StringType()),
    StructField("status", StringType()),
    StructField("balance", LongType()),
    StructField("version", LongType()),
    StructField("last_event_time", TimestampType()),
    StructField("last_event_id", StringType()),
])


class DomainError(ValueError):
    pass


class BankFold:
    """Folds one account's events; rule breaks raise, which dead-letters the event."""

    read_model_schema = READ_MODEL_SCHEMA

    def parse(self, key: bytes, event: dict[str, Any] | None) -> dict[str, Any]:
        """Check a decoded event (None: its value did not decode) against the domain."""
        if not isinstance(event, dict):
            raise DomainError("event is not an AccountEvent record")
        if event.get("type") not in EVENT_TYPES:
            raise DomainError(f"unknown event type {event.get('type')!r}")
        for name in ("event_id", "account_id", "at"):
            if name not in event:
                raise DomainError(f"event has no {name}")
        if event["account_id"] != key.decode():
            raise DomainError("record key and account_id differ")
        if event["type"] in ("MoneyDeposited", "MoneyWithdrawn"):
            amount = event.get("amount")
            if not isinstance(amount, int) or amount <= 0:
                raise DomainError(f"amount must be a positive integer, got {amount!r}")
        return event

    def apply(self, state: dict[str, Any] | None, event: dict[str, Any]) -> dict[str, Any]:
        kind = event["type"]
        if kind == "AccountOpened":
            if state is not None:
                raise DomainError("account already opened")
            state = {"account_id": event["account_id"], "owner": event.get("owner"),
                     "status": "open", "balance": 0}
        else:
            if state is None:
                raise DomainError(f"{kind} before AccountOpened")
            if state["status"] != "open":
                raise DomainError(f"{kind} on a closed account")
            state = dict(state)
            if kind == "MoneyDeposited":
                state["balance"] += event["amount"]
            elif kind == "MoneyWithdrawn":
                if event["amount"] > state["balance"]:
                    raise DomainError("insufficient funds")
                state["balance"] -= event["amount"]
            else:
                state["status"] = "closed"
        # ISO-8601 so Spark's from_json reads it as a timestamp.
        at = datetime.fromtimestamp(event["at"] / 1000, UTC)
        state["last_event_time"] = at.isoformat(timespec="milliseconds").replace("+00:00", "Z")
        state["last_event_id"] = event["event_id"]
        return state


History = list[tuple[bytes, "dict[str, Any] | bytes"]]

CHANNELS = ("branch", "online", "atm")

# Not an Avro record in Confluent's framing: what a producer bypassing the serializer writes.
NOT_AVRO = b"{not avro"


def generate(
    accounts: int, events: int, seed: int = 7, bad_every: int = 97,
    start_ms: int = 1_700_000_000_000,
) -> History:
    """A reproducible event history (key, event); every `bad_every`-th event is broken:
    bytes that are no Avro record (to be produced as they are), or a record breaking a
    domain rule (a withdrawal beyond any balance, a deposit of a negative amount)."""
    rng = random.Random(seed)
    out: History = []
    slots = [f"acc-{n}" for n in range(accounts)]  # a closed account's slot gets a new account
    balances: dict[str, int] = {}  # open accounts
    reopened = 0
    at = start_ms
    for i in range(events):
        at += rng.randint(1, 5000)
        slot = rng.randrange(accounts)
        acc = slots[slot]
        event_id = str(uuid.UUID(int=rng.getrandbits(128)))
        if bad_every and i % bad_every == bad_every - 1:
            broken: dict[str, Any] | bytes = rng.choice([
                NOT_AVRO,
                {"event_id": event_id, "type": "MoneyDeposited", "account_id": acc,
                 "at": at, "amount": -rng.randint(1, 20_000), "channel": "online"},
                {"event_id": event_id, "type": "MoneyWithdrawn", "account_id": acc,
                 "at": at, "amount": 10**12, "channel": "atm"},
            ])
            out.append((acc.encode(), broken))
            continue
        if acc not in balances:
            event = {"type": "AccountOpened", "owner": f"owner-{acc[4:]}"}
            balances[acc] = 0
        else:
            kind = rng.choices(["MoneyDeposited", "MoneyWithdrawn", "AccountClosed"],
                               weights=[60, 38, 2])[0]
            if kind == "MoneyWithdrawn" and balances[acc] == 0:
                kind = "MoneyDeposited"
            event = {"type": kind}
            if kind == "MoneyDeposited":
                event["amount"] = rng.randint(1, 20_000)
                balances[acc] += event["amount"]
            elif kind == "MoneyWithdrawn":
                event["amount"] = rng.randint(1, balances[acc])
                balances[acc] -= event["amount"]
            else:
                del balances[acc]
                reopened += 1
                slots[slot] = f"acc-{accounts + reopened}"
        event.update({"event_id": event_id, "account_id": acc, "at": at,
                      "channel": rng.choice(CHANNELS)})
        out.append((acc.encode(), event))
    return out


def expected_read_model(history: History) -> dict[str, dict[str, Any]]:
    """The read model computed without Spark, per account, in produce order."""
    fold = BankFold()
    states: dict[str, dict[str, Any]] = {}
    for key, value in history:
        acc = key.decode()
        try:
            event = value if isinstance(value, dict) else None  # bytes: no Avro record
            new = fold.apply(states.get(acc), fold.parse(key, event))
        except Exception:  # noqa: BLE001 - dead-lettered, as the stream does
            continue
        new["version"] = states.get(acc, {}).get("version", 0) + 1
        states[acc] = new
    return states
