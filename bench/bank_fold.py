"""The projection's per-key fold on decoded events beside the same fold parsing JSON bytes,
in one run, outside Spark (one core): what the typed path costs or saves per event.

    python bench/bank_fold.py                    # 200,000 events
    python bench/bank_fold.py --events 50000     # smoke run

Both sides run ``chronik.spark.projection.fold_function`` over the bank example's generated
history, one pandas frame per account as applyInPandasWithState hands them:

- typed: ``value`` holds each event as the dict Spark gives a struct column
  (``valueFormat=avro``), ``value_raw`` the bytes of those that did not decode;
- bytes: ``value`` holds each event as JSON and the fold parses it first.

Figures (best of --repeat) go to stdout and bench/results/bank_fold.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "examples" / "bank"))

import bank  # noqa: E402
import pandas as pd  # noqa: E402

from chronik.spark.projection import fold_function  # noqa: E402

FIELDS = ("event_id", "type", "account_id", "at", "owner", "amount", "channel")


class JsonBankFold(bank.BankFold):
    """The bank's fold on JSON bytes, as the example read its events before Avro."""

    def parse(self, key: bytes, value: Any) -> dict[str, Any]:
        try:
            event = json.loads(value)
        except ValueError as exc:
            raise bank.DomainError(f"not JSON: {exc}") from None
        return super().parse(key, event)


class State:
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


def frames(history: bank.History, typed: bool) -> dict[bytes, pd.DataFrame]:
    rows: dict[bytes, list] = {}
    for offset, (key, event) in enumerate(history):
        if typed:
            value, raw = (
                (None, event)
                if isinstance(event, bytes)
                else ({f: event.get(f) for f in FIELDS}, None)
            )
            rows.setdefault(key, []).append((key, value, raw, 0, offset))
        else:
            value = event if isinstance(event, bytes) else json.dumps(event).encode()
            rows.setdefault(key, []).append((key, value, 0, offset))
    columns = (
        ["key", "value", "value_raw", "partition", "offset"]
        if typed
        else ["key", "value", "partition", "offset"]
    )
    return {k: pd.DataFrame(r, columns=columns) for k, r in rows.items()}


def run(by_key: dict[bytes, pd.DataFrame], typed: bool) -> tuple[float, int]:
    fold = fold_function(bank.BankFold() if typed else JsonBankFold(), typed=typed)
    dead = 0
    start = time.perf_counter()
    for key, frame in by_key.items():
        out = pd.concat(list(fold((key,), iter([frame]), State())))
        dead += int((out.kind == "dead").sum())
    return time.perf_counter() - start, dead


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--accounts", type=int, default=2_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    history = bank.generate(args.accounts, args.events, seed=7)
    results = {}
    for typed in (True, False):
        by_key = frames(history, typed)
        best, dead = min(run(by_key, typed) for _ in range(args.repeat))
        name = "typed" if typed else "bytes"
        results[name] = {"seconds": best, "events_per_s": args.events / best, "dead": dead}
        print(f"{name:>5}: {best:.3f} s, {args.events / best:,.0f} events/s, {dead} dead letters")
    assert results["typed"]["dead"] == results["bytes"]["dead"]
    ratio = results["bytes"]["seconds"] / results["typed"]["seconds"]
    print(f"typed / bytes throughput: {ratio:.2f}x")
    out = HERE / "results" / "bank_fold.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "events": args.events,
                "accounts": args.accounts,
                "python": platform.python_version(),
                **results,
                "typed_over_bytes": ratio,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
