"""The bank's command side: open, deposit, withdraw and close an account, event-sourced.

A command loads the account's events by key (``EventStore.read``), folds them into the
current state with the same ``BankFold`` the Spark projection uses, decides, and appends
the one new event with the expected version = the number of events it read. If another
teller appended to the account in between, the broker refuses the append
(``VersionConflict``) and the command reloads and decides again, up to ``retries`` times.
So a decision is only ever written on top of the exact history it was made from: two
tellers can never both spend the same balance.

The decision reuses the fold's rules: the new event is applied to the loaded state, and
the fold raises ``DomainError`` for a withdrawal beyond the balance, anything on a closed
or unknown account, or an account opened twice; such a command is refused and nothing is
written. The store is anything with ``read(topic, key, decode=True)`` and
``append(topic, key, events, expected_version=..., subject=...)`` raising
``VersionConflict`` as ``chronik.eventstore.EventStore`` does.

Events are Avro, as the generator writes them: appends name the events topic's subject
(``<topic>-value``) and send the event as JSON, which the broker checks against the latest
schema and writes in Confluent's wire format; reads ask the broker to decode them
(``decode=True``), so the fold gets the same dicts the Spark projection does.
"""

from __future__ import annotations

import random
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import bank
import event_schemas

COMMANDS = ("open", "deposit", "withdraw", "close")


class Refused(bank.DomainError):
    """The account's current state does not allow the command; nothing was written."""

    conflicts = 0  # appends lost to other writers before the refusal


class TooManyConflicts(RuntimeError):
    """Every attempt lost the race to another writer."""

    conflicts = 0


@dataclass
class Account:
    account_id: str
    state: dict[str, Any] | None  # None: never opened
    version: int  # how many events the account has: the next append expects this

    @property
    def balance(self) -> int:
        return self.state["balance"] if self.state else 0


@dataclass
class Outcome:
    event: dict[str, Any]
    version: int  # the appended event's version
    attempts: int
    conflicts: int = 0
    refused: str | None = field(default=None)


def fold_events(account_id: str, values: list[dict[str, Any] | None]) -> dict[str, Any] | None:
    """The account's state from its decoded events in version order (None: a value that
    did not decode). Events the fold refuses are skipped, as the projection dead-letters
    them."""
    fold = bank.BankFold()
    key = account_id.encode()
    state = None
    for value in values:
        try:
            state = fold.apply(state, fold.parse(key, value))
        except Exception:  # noqa: BLE001 - a broken event: the read side dead-letters it
            continue
    return state


def load(store, topic: str, account_id: str) -> Account:
    events = store.read(topic, account_id, decode=True)
    # Versions survive retention: the next one follows the last read, not the number read.
    version = events[-1].version + 1 if events else 0
    return Account(account_id, fold_events(account_id, [e.value_json for e in events]), version)


def new_event(kind: str, account_id: str, amount: int | None = None,
              owner: str | None = None) -> dict[str, Any]:
    event: dict[str, Any] = {
        "event_id": str(uuid.uuid4()), "type": kind, "account_id": account_id,
        "at": int(time.time() * 1000), "channel": "teller",
    }
    if kind == "AccountOpened":
        event["owner"] = owner or account_id
    elif amount is not None:
        event["amount"] = amount
    return event


_EVENT_OF = {"open": "AccountOpened", "deposit": "MoneyDeposited",
             "withdraw": "MoneyWithdrawn", "close": "AccountClosed"}


def decide(account: Account, command: str, amount: int | None = None,
           owner: str | None = None) -> dict[str, Any]:
    """The event the command produces on this account, or Refused."""
    if command not in _EVENT_OF:
        raise ValueError(f"unknown command {command!r}")
    if command in ("deposit", "withdraw") and (not isinstance(amount, int) or amount <= 0):
        raise Refused(f"amount must be a positive integer, got {amount!r}")
    event = new_event(_EVENT_OF[command], account.account_id, amount, owner)
    try:
        bank.BankFold().apply(account.state, event)  # the read side's rules decide
    except bank.DomainError as exc:
        raise Refused(str(exc)) from None
    return event


def execute(store, topic: str, account_id: str, command: str, amount: int | None = None,
            owner: str | None = None, retries: int = 20) -> Outcome:
    """Load, decide, append with the expected version; on a conflict reload and decide
    again, at most ``retries`` times. Raises Refused or TooManyConflicts."""
    from chronik.eventstore import VersionConflict

    conflicts = 0
    for attempt in range(1, retries + 2):
        account = load(store, topic, account_id)
        try:
            event = decide(account, command, amount, owner)
        except Refused as exc:  # nothing written
            exc.conflicts = conflicts
            raise
        try:
            appended = store.append(topic, account_id, [event], expected_version=account.version,
                                    subject=event_schemas.subject(topic))
        except VersionConflict:
            # An append whose answer was lost is resent, and then conflicts with itself:
            # if the event is in the log after all, the command is done.
            mine = [e for e in store.read(topic, account_id, from_version=account.version,
                                          decode=True)
                    if _event_id(e.value_json) == event["event_id"]]
            if mine:
                return Outcome(event, mine[0].version, attempt, conflicts)
            conflicts += 1
            time.sleep(random.uniform(0, 0.002 * min(attempt, 10)))  # spread the retries
            continue
        return Outcome(event, appended.first_version, attempt, conflicts)
    exc = TooManyConflicts(f"{command} on {account_id}: {conflicts} conflicts in a row")
    exc.conflicts = conflicts
    raise exc


def _event_id(value: Any) -> str | None:
    return value.get("event_id") if isinstance(value, dict) else None


class Teller:
    """Runs commands against one store and counts what happened."""

    def __init__(self, store, topic: str, retries: int = 20):
        self.store, self.topic, self.retries = store, topic, retries
        self.done = self.refused = self.conflicts = self.gave_up = 0
        self.withdrawn = 0

    def run(self, account_id: str, command: str, amount: int | None = None,
            owner: str | None = None) -> Outcome | None:
        try:
            out = execute(self.store, self.topic, account_id, command, amount, owner,
                          self.retries)
        except Refused as exc:
            self.refused += 1
            self.conflicts += exc.conflicts
            return None
        except TooManyConflicts as exc:
            self.gave_up += 1
            self.conflicts += exc.conflicts
            return None
        self.done += 1
        self.conflicts += out.conflicts
        if command == "withdraw":
            self.withdrawn += amount or 0
        return out
