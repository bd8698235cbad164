"""Aggregate produce throughput of a 3-broker chronik cluster against one chronik broker,
and against Tansu, in one run, with the same multi-process producer load.

    python bench/cluster_bench.py            # a few minutes
    python bench/cluster_bench.py --quick    # smoke run, well under a minute

The cluster is a local ZooKeeper plus three `chronik serve` processes (broker.id 1..3,
each with its own data directory); the single broker is one plain `chronik serve`; Tansu
is the peer from broker_bench.py. Only one setup runs at a time. Each is loaded by
several producer processes (producer_load.py) sending keyed records to a 12-partition
topic, with acks=1 and with acks=all. Prints a table with the ratios cluster/single and
cluster/tansu and writes JSON to bench/results/.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from confluent_kafka.admin import AdminClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
# This checkout's chronik (for its ZooKeeper launcher), whatever else is installed.
sys.path.insert(1, str(Path(__file__).resolve().parent.parent / "src"))

from broker_bench import chronik_revision, machine  # noqa: E402
from brokers import BrokerProcess, Chronik, Tansu, free_port  # noqa: E402
from producer_load import LoadSettings, run_load  # noqa: E402
from results_table import render_cluster_table  # noqa: E402
from workloads import create_topic  # noqa: E402

RESULTS_DIR = Path(__file__).resolve().parent / "results"
SETUPS = ("single", "cluster", "tansu")
ACKS = ("1", "all")
CLUSTER_SIZE = 3


@dataclass(frozen=True)
class Settings:
    producers: int = 4
    partitions: int = 12
    record_size: int = 1000
    seconds: float = 8.0
    warmup_records: int = 20_000
    keys: int = 1000
    batch_size: int = 16_384
    linger_ms: int = 5

    def load(self, acks: str) -> LoadSettings:
        return LoadSettings(
            producers=self.producers,
            acks=acks,
            record_size=self.record_size,
            seconds=self.seconds,
            warmup_records=self.warmup_records,
            keys=self.keys,
            batch_size=self.batch_size,
            linger_ms=self.linger_ms,
        )


QUICK = Settings(producers=3, seconds=1.5, warmup_records=2_000)


class ClusterChronik(Chronik):
    """One broker of the cluster: `chronik serve` with zookeeper.connect and broker.id."""

    def __init__(
        self, node_id: int, zookeeper: str, workdir: Path, src: Path | None = None
    ) -> None:
        super().__init__(src=src) if src is not None else super().__init__()
        shutil.rmtree(self.workdir, ignore_errors=True)
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.name = f"chronik-{node_id}"
        self.node_id = node_id
        self.zookeeper = zookeeper

    def command(self) -> list[str]:
        return [
            *super().command(),
            "--set",
            f"zookeeper.connect={self.zookeeper}",
            "--set",
            f"broker.id={self.node_id}",
        ]


class Setup:
    """What a load runs against: one broker, or a ZooKeeper and three brokers."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.brokers: list[BrokerProcess] = []
        self.zookeeper = None
        self.workdir = Path(tempfile.mkdtemp(prefix=f"chronik-cluster-bench-{name}-"))

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers)

    def start(self) -> None:
        if self.name == "tansu":
            self.brokers = [Tansu()]
        elif self.name == "single":
            self.brokers = [Chronik()]
        else:
            from chronik.cluster.zookeeper_process import ZooKeeperProcess

            self.zookeeper = ZooKeeperProcess(self.workdir / "zookeeper", free_port()).start()
            chroot = f"{self.zookeeper.connect}/bench-{uuid.uuid4().hex[:8]}"
            self.brokers = [
                ClusterChronik(n, chroot, self.workdir / f"broker-{n}")
                for n in range(1, CLUSTER_SIZE + 1)
            ]
        for broker in self.brokers:
            broker.start()
        self._wait_for_members(len(self.brokers))

    def _wait_for_members(self, count: int, timeout_s: float = 30.0) -> None:
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if len(admin.list_topics(timeout=5).brokers) >= count:
                return
            time.sleep(0.1)
        raise RuntimeError(f"{self.name}: fewer than {count} brokers after {timeout_s}s")

    def cpu_seconds(self) -> float:
        return sum(b.cpu_seconds() for b in self.brokers)

    def rss_mb(self) -> float:
        return sum(b.rss_mb() for b in self.brokers)

    def version(self) -> str:
        if self.name == "tansu" and self.brokers:
            return self.brokers[0].version()  # type: ignore[attr-defined]
        return chronik_revision()

    def alive(self) -> bool:
        return all(b.proc is not None and b.proc.poll() is None for b in self.brokers)

    def log_tail(self) -> str:
        return "\n".join(f"[{b.name}]\n{b.log_tail(8)}" for b in self.brokers)

    def stop(self) -> None:
        for broker in self.brokers:
            broker.stop()
        if self.zookeeper is not None:
            self.zookeeper.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)


class SetupMeter:
    """CPU of every broker process of a setup over the measured window."""

    def __init__(self, setup: Setup) -> None:
        self.setup = setup
        self.cpu_s = 0.0
        self.wall_s = 0.0

    def start(self) -> None:
        self._cpu0 = self.setup.cpu_seconds()
        self._wall0 = time.perf_counter()

    def stop(self) -> None:
        self.cpu_s = self.setup.cpu_seconds() - self._cpu0
        self.wall_s = time.perf_counter() - self._wall0


def measure(setup: Setup, settings: Settings, acks: str, run: int) -> dict[str, object]:
    topic = f"cluster-bench-acks-{acks}-run{run}"
    meter = SetupMeter(setup)
    try:
        leaders = create_topic(setup.bootstrap, topic, settings.partitions)
        result = run_load(setup.bootstrap, topic, settings.load(acks), meter=meter)
    except Exception as exc:  # one failing setup must not hide the others' figures
        row: dict[str, object] = {"error": f"{type(exc).__name__}: {exc}"}
        if not setup.alive():
            row["error"] = f"{row['error']} (a broker exited)\n{setup.log_tail()}"
        return row
    return {
        **result.as_dict(settings.record_size),
        "leaders_per_broker": leaders,
        "broker_cpu_s": meter.cpu_s,
        "broker_cores": meter.cpu_s / meter.wall_s if meter.wall_s else 0.0,
        "broker_rss_mb": setup.rss_mb(),
    }


def best(rows: list[dict[str, object]]) -> dict[str, object]:
    """The repetition least disturbed by other load on the machine: the fastest."""
    ok = [r for r in rows if "error" not in r]
    if not ok:
        return rows[-1]
    chosen = max(ok, key=lambda r: r["records_per_s"])
    return {**chosen, "repetitions": [r.get("records_per_s") for r in rows]}


def ratios(results: dict[str, dict[str, dict]]) -> dict[str, dict[str, float | None]]:
    out: dict[str, dict[str, float | None]] = {}
    for acks in ACKS:
        row = f"acks-{acks}"

        def rate(setup: str, row: str = row) -> float | None:
            value = results.get(setup, {}).get(row, {}).get("records_per_s")
            return float(value) if value else None

        cluster, single, tansu = rate("cluster"), rate("single"), rate("tansu")
        out[row] = {
            "cluster/single": cluster / single if cluster and single else None,
            "cluster/tansu": cluster / tansu if cluster and tansu else None,
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few seconds per setup")
    parser.add_argument("--setups", default=",".join(SETUPS), help="subset of single,cluster,tansu")
    parser.add_argument("--repeat", type=int, default=1, help="run N times, keep each row's best")
    parser.add_argument("--seconds", type=float, help="measured produce time per row")
    parser.add_argument("--producers", type=int, help="producer processes")
    parser.add_argument("--record-size", type=int, help="bytes per record value")
    parser.add_argument("--batch-size", type=int, help="producer batch.size")
    parser.add_argument("--linger-ms", type=int, help="producer linger.ms")
    parser.add_argument("--output", type=Path, help="JSON file (default: bench/results/...)")
    args = parser.parse_args(argv)

    settings = QUICK if args.quick else Settings()
    overrides = {
        "seconds": args.seconds,
        "producers": args.producers,
        "record_size": args.record_size,
        "batch_size": args.batch_size,
        "linger_ms": args.linger_ms,
    }
    settings = replace(settings, **{k: v for k, v in overrides.items() if v is not None})
    names = [n.strip() for n in args.setups.split(",") if n.strip()]
    unknown = [n for n in names if n not in SETUPS]
    if unknown:
        parser.error(f"unknown setup(s): {', '.join(unknown)}")

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    runs: dict[str, dict[str, list[dict]]] = {name: {} for name in names}
    startup_errors: dict[str, str] = {}
    versions: dict[str, str] = {}
    started = time.time()
    load_at_start = os.getloadavg()
    for run in range(args.repeat):
        # Alternate the order so drifting load on the machine hits every setup alike.
        order = names if run % 2 == 0 else list(reversed(names))
        for name in order:
            if name in startup_errors:
                continue
            setup = Setup(name)
            try:
                try:
                    setup.start()
                except Exception as exc:
                    startup_errors[name] = f"{type(exc).__name__}: {exc}"
                    print(f"{name} failed to start: {exc}", file=sys.stderr, flush=True)
                    continue
                versions[name] = setup.version()
                print(f"{name}: {setup.bootstrap}", flush=True)
                for acks in ACKS:
                    row = measure(setup, settings, acks, run)
                    runs[name].setdefault(f"acks-{acks}", []).append(row)
                    shown = row.get("error") or f"{row['records_per_s']:,.0f} records/s"
                    print(f"  run {run} acks={acks:<4} {name:<8} {shown}", flush=True)
            finally:
                setup.stop()
    load_at_end = os.getloadavg()

    results = {
        name: {row: best(rows) for row, rows in by_row.items()} for name, by_row in runs.items()
    }
    report = {
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "mode": "quick" if args.quick else "full",
        "settings": asdict(settings),
        "cluster_size": CLUSTER_SIZE,
        "machine": {
            **machine(),
            "load_avg_at_start": load_at_start,
            "load_avg_at_end": load_at_end,
        },
        "setups": {
            name: {"version": versions.get(name, ""), "startup_error": startup_errors.get(name)}
            for name in names
        },
        "repeat": args.repeat,
        "results": results,
        "ratios": ratios(results),
        "runs": runs,
    }
    output = args.output or RESULTS_DIR / time.strftime(
        f"cluster-bench-%Y%m%d-%H%M%S{'-quick' if args.quick else ''}.json", time.gmtime(started)
    )
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=2) + "\n")

    print()
    print(render_cluster_table(results, names, report["ratios"]))
    print(f"JSON: {output}")
    failed = startup_errors or any("error" in r for rows in results.values() for r in rows.values())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
