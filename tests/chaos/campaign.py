"""Chaos campaigns: a fault schedule (chaos.schedule) against a fresh cluster while the
Jepsen-style workload (chaos.workload) runs, then healing, the final read and the
checker. Run from the repository's root (``make chaos``) or from tests/:

    PYTHONPATH=tests .venv/bin/python -m chaos.campaign --minutes N --seed S
        [--seeds 1,2,3] [--scenario NAME|all] [--kinds k1,k2] [--out DIR]
    ... -m chaos.campaign --replay SAVED_RUN      # the same faults to the same nodes
    ... -m chaos.campaign --list                  # scenarios and fault kinds

``--minutes`` is the fault time of the whole invocation, split evenly between the seeds
of a random campaign (``--seeds 1,2,3 --minutes 30``: three runs of 10 minutes, each on
a fresh cluster); a named scenario has its own fixed length. Each run prints its faults
as they happen, then its figures: faults applied by kind, records sent, acknowledged,
lost and duplicated, the longest unavailability of each partition, transactions,
event-store appends, the groups' reads and commits, and the seed. A run with an anomaly
(or a harness failure) is saved (Workload.save: $CHAOS_SAVE_DIR, default
/tmp/chronik-chaos-runs), and the commands that run it again are printed. The exit
status is 0 when every run was clean, 1 when any found an anomaly, 2 when the harness
itself failed.

Layout of a run's directory (``--out DIR``, else a temporary one removed after a clean
run): ``cluster/`` (ZooKeeper and the brokers: data, logs), ``run/`` (chaos.saved_run,
with chaos.schedule's schedule.json).
"""

from __future__ import annotations

import argparse
import logging
import random
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chronik.cluster.zookeeper_process import zookeeper_classpath

from .cluster import ChaosCluster
from .faults import KINDS, heal_all, unavailable_kinds
from .net import usable
from .nodes import faketime_available
from .report import Report
from .schedule import (
    SCENARIOS,
    SCHEDULE_FILE,
    Runner,
    Schedule,
    load_replay,
    random_schedule,
    scenario,
)
from .workload import Workload

# A broker's data filesystem when a schedule fills disks: room for a long campaign's
# data, small enough to fill in a second.
DISK_MB = 256
# A broker's replica.fetch.max.bytes when a schedule moves partitions: a throttled copy
# then spans many fetches (Kafka's default of 1 MiB takes a short run's log in one).
SMALL_FETCH_BYTES = 8192
SETTLE_S = 120.0
RERUN_PREFIX = "PYTHONPATH=tests .venv/bin/python -m chaos.campaign"


@dataclass
class Outcome:
    name: str
    seed: int
    report: Report | None = None
    faults: dict[str, int] = field(default_factory=dict)
    # Steps not applied or not healed as planned: "<kind> <outcome>: <description>".
    misses: list[str] = field(default_factory=list)
    error: str | None = None
    saved: Path | None = None
    run_dir: Path | None = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None and self.report is not None and self.report.ok

    @property
    def status(self) -> int:
        return 0 if self.ok else (2 if self.error is not None else 1)


def features(schedule: Schedule) -> dict[str, Any]:
    """The ChaosCluster options a schedule needs."""
    needs = schedule.needs()
    return {
        "disk_mb": DISK_MB if "disk" in needs else 0,
        "zk_proxies": "zk_proxies" in needs,
        "faketime": "faketime" in needs and faketime_available(),
        "config": ({"replica.fetch.max.bytes": str(SMALL_FETCH_BYTES)}
                   if "small_fetches" in needs else None),
    }


def settle(cluster: ChaosCluster, workload: Workload, say: Callable[[str], None],
           timeout: float = SETTLE_S) -> None:
    """Until every broker is registered under a live controller and every workload
    partition is led with its full ISR, with no reassignment in progress; what does not
    come in ``timeout`` is said (the final read then records it, and the checker reports
    it)."""
    started = time.monotonic()
    try:
        cluster.wait_settled(timeout)
        for spec in workload.topics.values():
            cluster.wait_reassigned(spec.name, timeout)
            cluster.wait_full_isr(spec.name, spec.partitions, timeout)
        say(f"settled in {time.monotonic() - started:.1f}s")
    except AssertionError as exc:
        say(f"did not settle: {exc}")


def run_one(
    schedule: Schedule,
    seed: int,
    out_dir: Path,
    *,
    say: Callable[[str], None] = print,
    until: float | None = None,
    workload_options: dict[str, Any] | None = None,
    save_on_failure: bool = True,
) -> Outcome:
    """One run on a fresh cluster: start, workload, ``schedule`` (no step begun after
    ``until`` seconds), heal, settle, stop, final read, check. Everything started is
    stopped before it returns, whatever happened."""
    out_dir = Path(out_dir)
    outcome = Outcome(schedule.name, seed, run_dir=out_dir / "run")
    schedule.seed = seed
    started = time.monotonic()
    options = features(schedule)
    cluster = ChaosCluster(out_dir / "cluster", brokers=3, clients=2, **options)
    workload: Workload | None = None
    runner: Runner | None = None
    try:
        cluster.start()
        workload = Workload(cluster, out_dir / "run", seed, **(workload_options or {}))
        workload.start()
        on = ", ".join(filter(None, [
            f"{options['disk_mb']} MB disks" if options["disk_mb"] else "",
            f"{SMALL_FETCH_BYTES} B replica fetches" if options["config"] else "",
            "ZooKeeper proxies" if options["zk_proxies"] else "",
            "libfaketime" if options["faketime"] else ""])) or "no extras"
        say(f"== {schedule.name} (seed {seed}): {schedule.about}; cluster with {on}; "
            f"run in {out_dir}")
        runner = Runner(cluster, workload, random.Random(f"chaos-faults-{seed}"), say)
        try:
            runner.run(schedule, until)
        finally:
            runner.save(out_dir / "run" / SCHEDULE_FILE, schedule)
            for line in heal_all(cluster, workload):
                say(f"heal all: {line}")
        settle(cluster, workload, say)
        time.sleep(schedule.tail)
        say("stopping the workload")
        workload.stop()
        say("final read")
        workload.final_read()
        report = workload.check()
        report.figures["faults"] = runner.by_kind()
        report.save(out_dir / "run" / "report.json")
        outcome.report = report
    except BaseException as exc:
        outcome.error = "".join(traceback.format_exception(exc))
        if not isinstance(exc, Exception):
            raise
    finally:
        if runner is not None:
            outcome.faults = runner.by_kind()
            outcome.misses = [f"{a.fault.kind} {a.outcome}: {a.fault.description}"
                              for a in runner.applied if a.outcome != "healed"]
        if workload is not None and not outcome.ok and save_on_failure:
            try:
                outcome.saved = workload.save()
            except Exception as exc:  # noqa: BLE001 - the failure itself matters more
                say(f"could not save the run: {exc!r}")
        if workload is not None:
            workload.close()
        cluster.close()
        outcome.seconds = time.monotonic() - started
    return outcome


def figures(outcome: Outcome) -> list[str]:
    """The run's figures, a few lines."""
    lines = [f"{outcome.name} seed {outcome.seed}: "
             f"{'OK' if outcome.ok else 'FAILED'} in {outcome.seconds:.0f}s"]
    total = sum(outcome.faults.values())
    lines.append(f"  faults applied: {total} ("
                 + ", ".join(f"{k} {n}" for k, n in outcome.faults.items()) + ")")
    lines += [f"  not as planned: {miss}" for miss in outcome.misses]
    if outcome.report is None:
        return lines
    f = outcome.report.figures
    lines.append(f"  records: sent {f.get('sent')}, acknowledged {f.get('acknowledged')}, "
                 f"lost {f.get('lost')}, duplicated {f.get('duplicated')}"
                 + (f" (+{f['duplicated_across_epochs']} resent by librdkafka in a new "
                    f"producer epoch)" if f.get("duplicated_across_epochs") else "")
                 + f", indeterminate {f.get('indeterminate')}, failed {f.get('failed')}")
    unavailable = f.get("unavailability_s", {})
    lines.append("  longest unavailability: "
                 + ", ".join(f"{k} {v:.1f}s" for k, v in sorted(unavailable.items())))
    t = f.get("transactions", {})
    lines.append(f"  transactions: {t.get('total')} (committed {t.get('committed')}, aborted "
                 f"{t.get('aborted')}, unknown {t.get('unknown')})")
    e = f.get("eventstore", {})
    lines.append(f"  appends: {e.get('appends')} (won {e.get('won')}, conflicts "
                 f"{e.get('conflicts')}, indeterminate {e.get('indeterminate')})")
    for role in ("queue", "txn"):
        g = f.get(f"group_{role}", {})
        lines.append(f"  group {role}: reads {g.get('reads')}, commits {g.get('commits')}, "
                     f"restarts {g.get('restarts')}, unread {g.get('unread')}")
    lines.append(f"  replica pairs compared: {f.get('replica_pairs_compared')}")
    return lines


def failure_lines(outcome: Outcome, rerun: str) -> list[str]:
    lines: list[str] = []
    if outcome.error is not None:
        lines.append("  harness error:")
        lines += ["    " + line for line in outcome.error.rstrip().splitlines()[-25:]]
    if outcome.report is not None and not outcome.report.ok:
        lines += ["  " + line for line in outcome.report.summary().splitlines()
                  if line.lstrip().startswith("[")]
    if outcome.run_dir is not None and outcome.run_dir.parent.exists():
        lines.append(f"  cluster data kept in {outcome.run_dir.parent / 'cluster'} (a broker's "
                     f"disk.img mounts with mount -o loop)")
    if outcome.saved is not None:
        lines.append(f"  saved in {outcome.saved}")
        lines.append(f"  check again: cd tests && ../.venv/bin/python -m chaos.checker "
                     f"{outcome.saved}")
        lines.append(f"  replay its faults: {RERUN_PREFIX} --replay {outcome.saved}")
    lines.append(f"  run again: {rerun}")
    return lines


def _plan(args: argparse.Namespace) -> list[tuple[Schedule, int, float | None, str]]:
    """(schedule, seed, until, rerun command) of each run of the invocation."""
    if args.replay:
        schedule = load_replay(Path(args.replay))
        seed = args.seed if args.seed is not None else int(schedule.seed or 0)
        return [(schedule, seed, None, f"{RERUN_PREFIX} --replay {args.replay}")]
    seeds = ([int(s) for s in args.seeds.split(",") if s.strip()] if args.seeds
             else [args.seed if args.seed is not None else random.randrange(1 << 31)])
    runs = []
    if args.scenario:
        names = list(SCENARIOS) if args.scenario == "all" else args.scenario.split(",")
        for seed in seeds:
            for name in names:
                runs.append((scenario(name), seed, None,
                             f"{RERUN_PREFIX} --scenario {name} --seed {seed}"))
        return runs
    minutes = args.minutes / len(seeds)
    missing = unavailable_kinds({"disk", "zk_proxies", "faketime", "workload",
                                 "small_fetches"})
    kinds = args.kinds.split(",") if args.kinds else list(KINDS)
    for kind, why in sorted(missing.items()):
        if kind in kinds:
            print(f"fault kind {kind} left out: {why}")
            kinds.remove(kind)
    kinds_arg = f" --kinds {args.kinds}" if args.kinds else ""
    for seed in seeds:
        runs.append((random_schedule(seed, minutes, kinds), seed, minutes * 60.0,
                     f"{RERUN_PREFIX} --minutes {minutes:g} --seed {seed}{kinds_arg}"))
    return runs


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m chaos.campaign", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=10.0,
                        help="fault time of a random campaign, split between the seeds")
    parser.add_argument("--seed", type=int, help="one seed (random when none is given)")
    parser.add_argument("--seeds", help="several seeds, comma separated, run one by one")
    parser.add_argument("--scenario", help=f"a named scenario, or all: {', '.join(SCENARIOS)}")
    parser.add_argument("--kinds", help="the random schedule's fault kinds, comma separated")
    parser.add_argument("--replay", help="a saved run whose schedule.json is applied again")
    parser.add_argument("--out", help="keep each run under this directory")
    parser.add_argument("--list", action="store_true", help="scenarios and fault kinds")
    args = parser.parse_args(argv)
    for kind in (args.kinds or "").split(","):
        if kind and kind not in KINDS:
            parser.error(f"unknown fault kind {kind!r}; --list shows them")
    for name in (args.scenario or "").split(","):
        if name and name != "all" and name not in SCENARIOS:
            parser.error(f"unknown scenario {name!r}; --list shows them")
    return args


def _interrupt(signum: int, frame: Any) -> None:
    # SIGTERM unwinds like Ctrl-C, so the cluster is closed.
    raise KeyboardInterrupt


def _say(line: str) -> None:
    print(line, flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.list:
        for name, (_, about) in SCENARIOS.items():
            print(f"scenario {name}: {about}")
        for kind, cls in KINDS.items():
            print(f"fault {kind}: {' '.join((cls.__doc__ or '').split())}")
        return 0
    why = usable() or (None if zookeeper_classpath() else "ZooKeeper is not installed "
                       "(scripts/install-test-deps.sh)")
    if why is not None:
        print(f"chaos campaign: this machine cannot host it: {why}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _interrupt)
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    # The harness's own ZooKeeper client reconnecting is expected under these faults.
    logging.getLogger("kazoo").setLevel(logging.ERROR)
    status = 0
    outcomes: list[tuple[Outcome, str]] = []
    for schedule, seed, until, rerun in _plan(args):
        keep = args.out is not None
        base = (Path(args.out) if keep else Path(tempfile.mkdtemp(prefix="chronik-chaos-")))
        out_dir = base / f"{schedule.name.replace(' ', '-')}-seed{seed}" if keep else base
        if until is not None:
            _say(f"-- seed {seed}: {len(schedule.steps)} steps planned over {until / 60:g} min")
        outcome = run_one(schedule, seed, out_dir, say=_say, until=until)
        outcomes.append((outcome, rerun))
        for line in figures(outcome):
            _say(line)
        if not outcome.ok:
            for line in failure_lines(outcome, rerun):
                _say(line)
        elif not keep:
            shutil.rmtree(base, ignore_errors=True)
        status = max(status, outcome.status)
    if len(outcomes) > 1:
        _say("== summary")
        for outcome, rerun in outcomes:
            _say(f"  {outcome.name} seed {outcome.seed}: {'OK' if outcome.ok else 'FAILED'}, "
                 f"{sum(outcome.faults.values())} faults, {outcome.seconds:.0f}s"
                 + ("" if outcome.ok else f" ({rerun})"))
    return status


if __name__ == "__main__":
    sys.exit(main())
