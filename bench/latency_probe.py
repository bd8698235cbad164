"""Latency under load: a light fixed-rate producer in its own process, beside a flat-out one.

It runs in a separate process so its delivery reports are timed as they arrive,
not when the load loop next yields the GIL. Its records go to the load's topic
(with linger.ms=0 and the load's acks), so they queue behind the load's batches
in the broker, and the consumer later reads them too.
"""

from __future__ import annotations

import multiprocessing
import queue
from dataclasses import asdict
from typing import Any

from workloads import LatencyResult, produce_latency

WARMUP_RECORDS = 20


class _StartTogether:
    """A Meter whose start() reports ready and waits for the load to begin."""

    def __init__(self, ready: Any, go: Any) -> None:
        self.ready = ready
        self.go = go

    def start(self) -> None:
        self.ready.set()
        self.go.wait(120)

    def stop(self) -> None:
        pass


def _run(options: dict[str, Any], ready: Any, go: Any, stop: Any, results: Any) -> None:
    try:
        result = produce_latency(
            **options,
            warmup_records=WARMUP_RECORDS,
            meter=_StartTogether(ready, go),
            stop=stop.is_set,
        )
        results.put(asdict(result))
    except Exception as exc:
        ready.set()
        results.put({"error": f"{type(exc).__name__}: {exc}"})


class LatencyProbe:
    def __init__(
        self, bootstrap: str, topic: str, *, acks: str, record_size: int, rate: int, seconds: float
    ) -> None:
        # spawn, not fork: the parent already runs librdkafka threads.
        ctx = multiprocessing.get_context("spawn")
        self._ready = ctx.Event()
        self._go = ctx.Event()
        self._stop = ctx.Event()
        self._results = ctx.Queue()
        options = {
            "bootstrap": bootstrap,
            "topic": topic,
            "acks": acks,
            "record_size": record_size,
            "rate": rate,
            # Long enough to outlast the load; stop() ends it with the load.
            "seconds": seconds * 4 + 30,
        }
        self._process = ctx.Process(
            target=_run,
            args=(options, self._ready, self._go, self._stop, self._results),
            daemon=True,
        )

    def __enter__(self) -> LatencyProbe:
        self._process.start()
        if not self._ready.wait(60):
            raise TimeoutError("latency probe not ready within 60 s")
        return self

    def go(self) -> None:
        self._go.set()

    def stop(self) -> None:
        self._stop.set()

    def result(self, timeout_s: float = 60.0) -> LatencyResult:
        try:
            data = self._results.get(timeout=timeout_s)
        except queue.Empty:
            raise TimeoutError("latency probe gave no result") from None
        if "error" in data:
            raise RuntimeError(f"latency probe failed: {data['error']}")
        return LatencyResult(**data)

    def __exit__(self, *exc: object) -> None:
        self._go.set()
        self._stop.set()
        self._process.join(10)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()
