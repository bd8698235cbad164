"""The projection's per-key fold, driven directly (no Spark): order, dead letters, replays."""

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
    body = {"event_id": f"e{offset}", "type": kind, "account_id": "acc-1", "at": 1000 + offset}
    body.update(extra)
    return (json.dumps(body).encode(), 0, offset)


def _run(fold, state, rows) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=["value", "partition", "offset"])
    frame.insert(0, "key", b"acc-1")
    # Spark may hand the rows in any order and split across frames.
    frames = [frame.iloc[::-1].iloc[: len(frame) // 2], frame.iloc[::-1].iloc[len(frame) // 2:]]
    return pd.concat(list(fold((b"acc-1",), iter(frames), state)))


def test_fold_applies_in_offset_order_and_dead_letters_bad_events():
    fold, state = fold_function(bank.BankFold()), FakeGroupState()
    out = _run(fold, state, [
        _event("AccountOpened", 0, owner="ann"),
        _event("MoneyDeposited", 1, amount=500),
        (b"{broken", 0, 2),
        _event("MoneyWithdrawn", 3, amount=900),  # more than the balance
        _event("MoneyWithdrawn", 4, amount=200),
    ])
    dead = out[out.kind == "dead"]
    assert list(dead.offset) == [2, 3]
    assert "JSONDecodeError" in dead.error.iloc[0] and "insufficient" in dead.error.iloc[1]
    states = out[out.kind == "state"]
    assert len(states) == 1 and states.offset.iloc[0] == 4
    final = json.loads(states.value.iloc[0])
    assert (final["balance"], final["version"], final["status"]) == (300, 3, "open")
    assert state.get[1:] == (0, 4)


def test_fold_skips_events_it_already_folded():
    fold, state = fold_function(bank.BankFold()), FakeGroupState()
    _run(fold, state, [_event("AccountOpened", 0), _event("MoneyDeposited", 1, amount=5)])
    out = _run(fold, state, [
        _event("MoneyDeposited", 1, amount=5),  # replayed
        _event("MoneyDeposited", 2, amount=7),
    ])
    final = json.loads(out[out.kind == "state"].value.iloc[0])
    assert (final["balance"], final["version"]) == (12, 3)
    assert out[out.kind == "dead"].empty


def test_generated_history_matches_the_independent_fold():
    history = bank.generate(accounts=5, events=400, seed=3)
    fold, states = fold_function(bank.BankFold()), {}
    by_key: dict[bytes, list] = {}
    for offset, (key, value) in enumerate(history):
        by_key.setdefault(key, []).append((key, value, 0, offset))
    for key, rows in by_key.items():
        state = FakeGroupState()
        frame = pd.DataFrame(rows, columns=["key", "value", "partition", "offset"])
        out = pd.concat(list(fold((key,), iter([frame]), state)))
        states[key.decode()] = json.loads(out[out.kind == "state"].value.iloc[-1])
    assert states == bank.expected_read_model(history)
