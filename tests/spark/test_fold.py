"""The projection's per-key fold, driven directly (no Spark): order, dead letters, replays,
on decoded events (the typed path the bank example takes) and on raw bytes."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "bank"))
bank = importlib.import_module("bank")

from chronik.spark.projection import fold_function  # noqa: E402


class FakeGroupState:
    """The part of Spark's GroupState the fold uses."""

    def __init__(self) -> None:
        self.value: tuple | None = None

    @property
    def exists(self) -> bool:
        return self.value is not None

    @property
    def get(self) -> tuple:
        assert self.value is not None
        return self.value

    def update(self, value: tuple) -> None:
        self.value = value


def _event(kind: str, offset: int, **extra) -> tuple:
    """A row as the source gives it with valueFormat=avro: (value, value_raw, ...)."""
    body = {"event_id": f"e{offset}", "type": kind, "account_id": "acc-1", "at": 1000 + offset,
            "owner": None, "amount": None, "channel": "branch"}
    body.update(extra)
    return (body, None, 0, offset)


def _run(fold, state, rows) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=["value", "value_raw", "partition", "offset"])
    frame.insert(0, "key", b"acc-1")
    # Spark may hand the rows in any order and split across frames.
    frames = [frame.iloc[::-1].iloc[: len(frame) // 2], frame.iloc[::-1].iloc[len(frame) // 2:]]
    return pd.concat(list(fold((b"acc-1",), iter(frames), state)))


def test_fold_applies_in_offset_order_and_dead_letters_bad_events():
    fold, state = fold_function(bank.BankFold(), typed=True), FakeGroupState()
    out = _run(fold, state, [
        _event("AccountOpened", 0, owner="ann"),
        _event("MoneyDeposited", 1, amount=500),
        (None, b"{broken", 0, 2),  # did not decode: no value, its bytes in value_raw
        _event("MoneyWithdrawn", 3, amount=900),  # more than the balance
        _event("MoneyWithdrawn", 4, amount=200),
        _event("MoneyDeposited", 5, amount=-3),
    ])
    dead = out[out.kind == "dead"]
    assert list(dead.offset) == [2, 3, 5]
    assert "UndecodableValue" in dead.error.iloc[0] and "insufficient" in dead.error.iloc[1]
    assert "positive" in dead.error.iloc[2]
    # The bytes that did not decode go on as they were; a decoded event goes as JSON.
    assert dead.value.iloc[0] == b"{broken"
    assert json.loads(dead.value.iloc[1])["amount"] == 900
    states = out[out.kind == "state"]
    assert len(states) == 1 and states.offset.iloc[0] == 4
    final = json.loads(states.value.iloc[0])
    assert (final["balance"], final["version"], final["status"]) == (300, 3, "open")
    assert state.get[1:] == (0, 4)


def test_fold_skips_events_it_already_folded():
    fold, state = fold_function(bank.BankFold(), typed=True), FakeGroupState()
    _run(fold, state, [_event("AccountOpened", 0), _event("MoneyDeposited", 1, amount=5)])
    out = _run(fold, state, [
        _event("MoneyDeposited", 1, amount=5),  # replayed
        _event("MoneyDeposited", 2, amount=7),
    ])
    final = json.loads(out[out.kind == "state"].value.iloc[0])
    assert (final["balance"], final["version"]) == (12, 3)
    assert out[out.kind == "dead"].empty


class JsonFold:
    """A fold on raw bytes, as projections without a value format get them."""

    read_model_schema = None

    def parse(self, key: bytes, value: bytes) -> dict:
        return json.loads(value)

    def apply(self, state: dict | None, event: dict) -> dict:
        return {"total": (state or {}).get("total", 0) + event["n"]}


def test_untyped_fold_gets_the_value_bytes():
    fold, state = fold_function(JsonFold()), FakeGroupState()
    frame = pd.DataFrame(
        [(b"k", b'{"n": 2}', 0, 0), (b"k", b"{no", 0, 1), (b"k", b'{"n": 5}', 0, 2)],
        columns=["key", "value", "partition", "offset"],
    )
    out = pd.concat(list(fold((b"k",), iter([frame]), state)))
    dead = out[out.kind == "dead"]
    assert list(dead.offset) == [1] and dead.value.iloc[0] == b"{no"
    assert "JSONDecodeError" in dead.error.iloc[0]
    final = json.loads(out[out.kind == "state"].value.iloc[0])
    assert (final["total"], final["version"]) == (7, 2)


def test_generated_history_matches_the_independent_fold():
    history = bank.generate(accounts=5, events=400, seed=3)
    fold, states = fold_function(bank.BankFold(), typed=True), {}
    by_key: dict[bytes, list] = {}
    for offset, (key, event) in enumerate(history):
        value, raw = (None, event) if isinstance(event, bytes) else (event, None)
        by_key.setdefault(key, []).append((key, value, raw, 0, offset))
    for key, rows in by_key.items():
        state = FakeGroupState()
        frame = pd.DataFrame(rows, columns=["key", "value", "value_raw", "partition", "offset"])
        out = pd.concat(list(fold((key,), iter([frame]), state)))
        states[key.decode()] = json.loads(out[out.kind == "state"].value.iloc[-1])
    assert states == bank.expected_read_model(history)
