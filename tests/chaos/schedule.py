"""Fault schedules (of chaos.faults) and the runner that applies one to a cluster while a
workload runs: a seeded random schedule, and the named scenarios as fixed ones.

A schedule is a list of steps. A step applies its fault ``delay`` seconds after the
previous step's apply returned, and heals it ``hold`` seconds after its own apply
returned; so steps may overlap. The random schedule overlaps at most two faults, of
different categories and never two that impair brokers (at most one broker, or
ZooKeeper, is impaired at a time), so a majority can always make progress.

Every step the runner takes is printed as it happens and written to the run's harness
history (chaos.history) as ``event fault {phase: "apply" | "heal" | "skip" | "error",
step, description, fault}`` (``fault``: Fault.to_json()), so ``python -m
chaos.history OUT_DIR`` shows faults and operations interleaved.

``SCHEDULE_FILE`` (``schedule.json`` in the run directory) is the schedule as it was
applied: ``{"name", "seed", "minutes", "steps": [{"step", "delay", "hold", "applied",
"healed", "description", "fault"}]}`` (``applied``/``healed``: seconds since the
schedule started, null when it never happened; ``fault``: the fault with every target
resolved, or as planned when it was skipped). ``load_replay`` makes a schedule of it
that does the same faults to the same nodes, with the same delays and holds.

Named scenarios (``SCENARIOS``), each on the queue topic's partition 0 where a partition
is meant:

- ``leader-zk``: the partition's leader cut off from ZooKeeper only, clients and
  brokers still reaching it;
- ``controller``: the controller isolated from every node;
- ``follower-leader``: an in-sync follower cut off from its leader only, ZooKeeper still
  reached;
- ``split``: majority/minority split, the partition's leader and one client node in the
  minority, producers on both sides;
- ``double-failover``: the leader killed, and the new leader killed as soon as it is
  elected (the first restarted 3 s later);
- ``txn-commit``: the transaction coordinator isolated just as a commit is asked for,
  then cut from the other brokers only at the next commit;
- ``reassign``: the partition's leader's replica removed by a reassignment (the
  leadership moves) and added back at a throttled rate, so its broker copies the log
  again; midway the new leader is killed (kill -9) and, once another is elected, the
  broker receiving the replica is cut off from it for a while; healed, the copy
  completes and the partition is back on its three replicas.
"""

from __future__ import annotations

import contextlib
import heapq
import json
import random
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .faults import (
    KINDS,
    Fault,
    FaultSkipped,
    FollowerFromLeader,
    IsolateController,
    IsolateNode,
    KillBroker,
    LeaderFromZooKeeper,
    Reassign,
    RestartConsumer,
    Split,
    TxnCoordinatorCut,
)

if TYPE_CHECKING:
    from .cluster import ChaosCluster
    from .workload import Workload

SCHEDULE_FILE = "schedule.json"
# Workload time before the first fault, so every worker has acknowledged something.
WARMUP_S = 5.0
# The random schedule's quiet time between one fault's heal and the next fault.
QUIET_S = (3.0, 12.0)
# The share of random steps that get a second, overlapping fault.
OVERLAP = 0.2
# The share of reassignments that get one: moving a partition is meant to meet faults.
REASSIGN_OVERLAP = 0.6


@dataclass
class Step:
    fault: Fault
    delay: float
    hold: float


@dataclass
class Schedule:
    name: str
    steps: list[Step]
    # Seconds the workload runs on after the last heal, before the run stops.
    tail: float = 8.0
    seed: int | None = None
    minutes: float | None = None
    about: str = ""

    def needs(self) -> set[str]:
        return {n for s in self.steps for n in s.fault.needs}

    def planned_s(self) -> float:
        """Seconds from start to the last planned heal (applies taking no time)."""
        at = end = 0.0
        for s in self.steps:
            at += s.delay
            end = max(end, at + s.hold)
        return end


# -- the random schedule ------------------------------------------------------------------


def random_schedule(seed: int, minutes: float, kinds: list[str]) -> Schedule:
    """Faults of ``kinds`` picked with a generator seeded by ``seed`` until ``minutes``
    are planned: each held for a time in its kind's range, then a quiet time; one step
    in five gets a second fault of another category that impairs no broker (a client
    isolated, a consumer restarted, or, when the first fault is a broker's, a partition
    reassigned) overlapping it. A reassignment gets a second fault more often (three in
    five), of any other kind but a client's: a broker killed, stopped or paused, a link
    cut, ZooKeeper down... healed at least a second before the reassignment's own heal,
    which waits for the partition to be back on its replicas. A reassignment that is
    the second fault is healed 1-8 s after the first, for the same reason. (Never with
    a ZooKeeper or network fault as the first: its steps would wait on a controller
    that cannot write, and the runner with them.)"""
    rng = random.Random(f"chaos-schedule-{seed}")
    steps: list[Step] = []
    budget = minutes * 60.0
    planned = 0.0
    delay = WARMUP_S
    while planned < budget:
        cls = KINDS[rng.choice(kinds)]
        hold = round(rng.uniform(*cls.holds), 1)
        steps.append(Step(cls(), round(delay, 1), hold))
        span = hold
        share = REASSIGN_OVERLAP if cls is Reassign else OVERLAP
        if rng.random() < share and hold > 2.0:
            companions: list[Fault] = []
            if cls is Reassign:
                companions += [KINDS[k]() for k in kinds
                               if KINDS[k].category not in ("admin", "client")]
            else:
                if "restart-consumer" in kinds:
                    companions.append(RestartConsumer())
                if cls.category != "net" and "isolate-node" in kinds:
                    companions.append(IsolateNode(role="client"))
                if cls.category == "broker" and "reassign" in kinds:
                    companions.append(Reassign(companion=True))
            if companions:
                second = rng.choice(companions)
                d2 = round(rng.uniform(0.0, hold / 2), 1)
                if isinstance(second, Reassign):
                    h2 = round(hold - d2 + rng.uniform(1.0, 8.0), 1)
                else:
                    margin = 1.0 if cls is Reassign else 0.0
                    h2 = round(rng.uniform(1.0, max(hold - d2 - margin, 1.0)), 1)
                steps.append(Step(second, d2, h2))
                span = max(hold - d2, h2)
        quiet = rng.uniform(*QUIET_S)
        planned += delay
        delay = span + quiet
    return Schedule("random", steps, seed=seed, minutes=minutes,
                    about=f"random faults of {len(kinds)} kinds for {minutes:g} min")


# -- named scenarios ------------------------------------------------------------------------

HOLD_S = 15.0


def _leader_zk(queue: str) -> list[Step]:
    return [Step(LeaderFromZooKeeper(partition=f"{queue}/0"), WARMUP_S, HOLD_S)]


def _controller(queue: str) -> list[Step]:
    return [Step(IsolateController(), WARMUP_S, HOLD_S)]


def _follower_leader(queue: str) -> list[Step]:
    return [Step(FollowerFromLeader(partition=f"{queue}/0"), WARMUP_S, HOLD_S)]


def _split(queue: str) -> list[Step]:
    return [Step(Split(leader_of=f"{queue}/0"), WARMUP_S, HOLD_S)]


def _double_failover(queue: str) -> list[Step]:
    return [
        Step(KillBroker(leader_of=f"{queue}/0", await_failover=True), WARMUP_S, 3.0),
        Step(KillBroker(leader_of=f"{queue}/0", await_failover=True), 0.0, 10.0),
    ]


def _txn_commit(queue: str) -> list[Step]:
    return [
        Step(TxnCoordinatorCut(mode="isolate"), WARMUP_S, 12.0),
        Step(TxnCoordinatorCut(mode="brokers"), 20.0, 12.0),
    ]


def _reassign(queue: str) -> list[Step]:
    partition = f"{queue}/0"
    return [
        Step(Reassign(partition=partition, mode="drop-add", drop_leader=True,
                      add_back="apply", throttle=2048), WARMUP_S, 24.0),
        Step(KillBroker(leader_of=partition, await_failover=True), 2.0, 5.0),
        Step(FollowerFromLeader(partition=partition, adding=True), 0.0, 8.0),
    ]


SCENARIOS: dict[str, tuple[Callable[[str], list[Step]], str]] = {
    "leader-zk": (_leader_zk, "the leader isolated from ZooKeeper, reachable by clients"),
    "controller": (_controller, "the controller isolated"),
    "follower-leader": (_follower_leader,
                        "a follower that reaches ZooKeeper but not its leader"),
    "split": (_split, "a majority/minority split with producers on both sides"),
    "double-failover": (_double_failover, "two failovers in quick succession"),
    "txn-commit": (_txn_commit, "a partition during a transaction commit"),
    "reassign": (_reassign, "a partition's leader moved off and back by reassignment, "
                            "its new leader killed and its new replica cut off midway"),
}


def scenario(name: str, queue_topic: str = "chaos-queue") -> Schedule:
    make, about = SCENARIOS[name]
    return Schedule(name, make(queue_topic), about=about)


def load_replay(run_dir: Path) -> Schedule:
    """The schedule a run applied (its schedule.json), with every target as it was."""
    doc = json.loads((Path(run_dir) / SCHEDULE_FILE).read_text())
    steps = [Step(Fault.from_json(s["fault"]), float(s["delay"]), float(s["hold"]))
             for s in doc["steps"]]
    return Schedule(f"replay of {doc.get('name')}", steps, seed=doc.get("seed"),
                    minutes=doc.get("minutes"), about=f"replay of {run_dir}")


# -- the runner ----------------------------------------------------------------------------


@dataclass
class Applied:
    step: int
    fault: Fault
    delay: float
    hold: float
    applied: float | None = None
    healed: float | None = None
    outcome: str = "planned"  # applied, healed, skipped, error


@dataclass
class Runner:
    """Applies a schedule to ``cluster`` while ``workload`` runs; ``say`` prints a line."""

    cluster: ChaosCluster
    workload: Workload | None
    rng: random.Random
    say: Callable[[str], None] = print
    applied: list[Applied] = field(default_factory=list)
    _start: float = 0.0

    def _t(self) -> float:
        return time.monotonic() - self._start

    def _record(self, phase: str, a: Applied, **extra: Any) -> None:
        if self.workload is not None and self.workload.harness is not None:
            # The fault's kind is inside ``fault``: an event's own ``kind`` is its writer's.
            self.workload.harness.event("fault", phase=phase, step=a.step,
                                        description=a.fault.description,
                                        fault=a.fault.to_json(), **extra)

    def run(self, schedule: Schedule, until: float | None = None) -> list[Applied]:
        """Every step (none begun after ``until`` seconds), each fault healed at its
        time; on any exception the faults still in force are healed before it goes on."""
        self._start = time.monotonic()
        heals: list[tuple[float, int, Applied]] = []
        at = 0.0
        try:
            for i, step in enumerate(schedule.steps):
                at += step.delay
                if until is not None and at > until:
                    break
                self._heal_due(heals, at)
                a = Applied(i, step.fault, step.delay, step.hold)
                self.applied.append(a)
                if self.workload is not None:
                    a.fault.workload = self.workload
                if self._apply(a):
                    heapq.heappush(heals, (self._t() + step.hold, i, a))
                at = self._t()
            self._heal_due(heals, float("inf"))
        finally:
            while heals:
                self._heal(heapq.heappop(heals)[2])
        return self.applied

    def _heal_due(self, heals: list[tuple[float, int, Applied]], until: float) -> None:
        while True:
            due = heals[0][0] if heals else None
            if due is None or due > until:
                wait = until - self._t()
                if wait > 0 and until != float("inf"):
                    time.sleep(wait)
                return
            wait = due - self._t()
            if wait > 0:
                time.sleep(wait)
            self._heal(heapq.heappop(heals)[2])

    def _apply(self, a: Applied) -> bool:
        t = self._t()
        try:
            a.fault.apply(self.cluster, self.rng)
        except FaultSkipped as exc:
            a.outcome = "skipped"
            a.fault.description = a.fault.description or f"skipped: {exc}"
            self.say(f"[{t:7.1f}s] ~ {a.fault.kind}: skipped: {exc}")
            self._record("skip", a, reason=str(exc))
            return False
        except Exception as exc:  # noqa: BLE001 - a harness step failing is reported, the run goes on
            a.outcome = "error"
            self.say(f"[{t:7.1f}s] ! {a.fault.kind}: apply failed: {exc!r}")
            self._record("error", a, error=traceback.format_exc()[-2000:])
            # Whatever part of it took effect is undone now (heal_all tries again).
            with contextlib.suppress(Exception):
                a.fault.heal(self.cluster)
            return False
        a.applied, a.outcome = round(t, 3), "applied"
        self.say(f"[{t:7.1f}s] + {a.fault.kind}: {a.fault.description} "
                 f"(for {a.hold:g}s, apply took {self._t() - t:.1f}s)")
        self._record("apply", a, hold=a.hold)
        return True

    def _heal(self, a: Applied) -> None:
        t = self._t()
        try:
            a.fault.heal(self.cluster)
        except Exception as exc:  # noqa: BLE001 - reported; heal_all at the end tries again
            self.say(f"[{t:7.1f}s] ! {a.fault.kind}: heal failed: {exc!r}")
            self._record("error", a, error=traceback.format_exc()[-2000:])
            return
        a.healed, a.outcome = round(t, 3), "healed"
        self.say(f"[{t:7.1f}s] - {a.fault.kind}: healed (took {self._t() - t:.1f}s)")
        self._record("heal", a)

    def by_kind(self) -> dict[str, int]:
        """Faults applied, by kind (skipped ones and failed applies left out)."""
        return dict(sorted(Counter(a.fault.kind for a in self.applied
                                   if a.applied is not None).items()))

    def save(self, path: Path, schedule: Schedule) -> None:
        doc = {
            "name": schedule.name, "seed": schedule.seed, "minutes": schedule.minutes,
            "steps": [{"step": a.step, "delay": a.delay, "hold": a.hold, "applied": a.applied,
                       "healed": a.healed, "outcome": a.outcome,
                       "description": a.fault.description, "fault": a.fault.to_json()}
                      for a in self.applied],
        }
        Path(path).write_text(json.dumps(doc, indent=1))
