"""The faults a chaos schedule (chaos.schedule) applies to a cluster (chaos.cluster), each a
small object: ``apply(cluster, rng)`` does it, ``heal(cluster)`` undoes what can be undone,
and ``description`` says in one line what was done to which node or link.

A fault's fields name its target (a broker, a link, a partition); a field left None is
chosen at apply time, with ``rng``, from what the cluster is then: "the leader" and "the
controller" are read from ZooKeeper when the fault is applied. Once applied every field
is filled in, so ``to_json()`` is the fault as it was done and ``from_json`` makes one
that does exactly that again (a replay).

Format of ``to_json()``: ``{"kind": <Fault.kind>, <field>: <value>, ...}`` with the
fields of the fault's class (node names ``zk``, ``b<i>``, ``c<i>``; broker ids as ints;
partitions as ``"<topic>/<p>"``).

Kinds and what each needs from the cluster (``Fault.needs``): ``disk`` (a cluster made
with ``disk_mb`` > 0), ``zk_proxies``, ``faketime`` (libfaketime installed: without it
the clock-jump kind is left out, and the campaign says so), ``workload`` (the fault acts
on the workload's workers; the runner binds it with ``fault.workload = workload``),
``small_fetches`` (brokers fetching at most chaos.campaign.SMALL_FETCH_BYTES of a
partition at a time, so a replica a reassignment adds copies the log over many fetches).

``reassign`` moves a partition as an operator does, through the Kafka protocol from a
client node (chaos.reassign_tool, run in the node's namespace, so the network faults of
the moment apply to it; it is tried again from the other client node, as an operator
would, for up to TOOL_RETRY_S): a replica removed and added back, or the replica order
rotated; its heal waits, bounded, until the partition is back on its replicas with no
reassignment in progress. It impairs no broker (category ``admin``), so the random
schedule overlaps it with kills, cuts, pauses and ZooKeeper faults.

``heal_all`` is the end of every run: the network whole, every process resumed and
running, disks freed, ZooKeeper delays off, consumers running.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from chronik.coordinator.offsets_codec import partition_for

from .cluster import BROKER_CONFIG, ChaosCluster, wait_until
from .history import HISTORY_DIR
from .nodes import faketime_available

if TYPE_CHECKING:
    from .workload import Workload

T = TypeVar("T")
TXN_TOPIC = "__transaction_state"
# How long a lookup in ZooKeeper may take (it may be reconnecting after a fault).
LOOKUP_S = 30.0


class FaultSkipped(RuntimeError):
    """The fault cannot be applied to this cluster now (nothing suitable to act on)."""


# -- looking things up --------------------------------------------------------------------


def _lookup(fn: Callable[[], T], what: str, timeout: float = LOOKUP_S) -> T:
    try:
        return wait_until(fn, what, timeout, 0.2)
    except AssertionError as exc:
        raise FaultSkipped(str(exc)) from exc


def split_partition(key: str) -> tuple[str, int]:
    topic, _, p = key.rpartition("/")
    return topic, int(p)


def user_partitions(cluster: ChaosCluster) -> list[str]:
    """``"<topic>/<p>"`` of every partition of the topics clients made (not ``__*``)."""
    def listing() -> list[str]:
        out = []
        for topic in sorted(cluster.children("/brokers/topics")):
            if topic.startswith("__"):
                continue
            out += [f"{topic}/{p}" for p in sorted(cluster.assignment(topic))]
        return out

    return _lookup(listing, "the topics' partitions")


def leader_of(cluster: ChaosCluster, key: str) -> int:
    topic, p = split_partition(key)

    def found() -> int | None:
        leader = cluster.leader(topic, p)
        return leader if leader > 0 else None

    return _lookup(found, f"a leader of {key}")


def controller_of(cluster: ChaosCluster) -> int:
    return _lookup(lambda: cluster.controller_id() if cluster.controller_id() > 0 else None,
                   "a controller")


def _pick_partition(cluster: ChaosCluster, rng: random.Random) -> str:
    partitions = user_partitions(cluster)
    if not partitions:
        raise FaultSkipped("no topic of the clients yet")
    return rng.choice(partitions)


def _up_brokers(cluster: ChaosCluster) -> list[int]:
    return [i for i, b in sorted(cluster.brokers.items()) if b.running and not b.paused]


def _pick_broker(cluster: ChaosCluster, rng: random.Random) -> int:
    up = _up_brokers(cluster)
    if not up:
        raise FaultSkipped("no broker is running")
    return rng.choice(up)


def _block(cluster: ChaosCluster, pairs: list[tuple[str, str]]) -> list[list[str]]:
    """Block each (from, to) pair; the ones this call added (one already blocked by
    another fault stays that fault's to heal)."""
    already = cluster.net.blocked
    added = []
    for src, dst in pairs:
        if src != dst and (src, dst) not in already:
            cluster.net.block(src, dst)
            added.append([src, dst])
    return added


def _unblock(cluster: ChaosCluster, pairs: list[list[str]]) -> None:
    for src, dst in pairs:
        cluster.net.unblock(src, dst)


def _both_ways(a: str, others: list[str]) -> list[tuple[str, str]]:
    return [pair for o in others if o != a for pair in ((a, o), (o, a))]


# -- the faults ---------------------------------------------------------------------------


@dataclass
class Fault:
    kind: ClassVar[str] = ""
    # What the cluster must have been made with (module docstring).
    needs: ClassVar[frozenset[str]] = frozenset()
    # The random schedule's range of hold times, seconds.
    holds: ClassVar[tuple[float, float]] = (5.0, 20.0)
    # net, broker, zookeeper, client, admin: a schedule overlaps two faults only of
    # different categories, and never two that impair brokers.
    category: ClassVar[str] = "net"

    description: str = field(default="", init=False, repr=False, compare=False)
    workload: Workload | None = field(default=None, init=False, repr=False, compare=False)

    def apply(self, cluster: ChaosCluster, rng: random.Random) -> None:
        raise NotImplementedError

    def heal(self, cluster: ChaosCluster) -> None:
        """Undo the fault (nothing for what cannot be undone, such as a clock jump)."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind}
        for f in dataclasses.fields(self):
            if f.init and not f.name.startswith("_"):
                out[f.name] = getattr(self, f.name)
        return out

    @staticmethod
    def from_json(doc: dict[str, Any]) -> Fault:
        params = dict(doc)
        cls = KINDS[params.pop("kind")]
        names = {f.name for f in dataclasses.fields(cls) if f.init}
        return cls(**{k: v for k, v in params.items() if k in names})

    def _bound(self) -> Workload:
        if self.workload is None:
            raise FaultSkipped(f"{self.kind} acts on the workload, and none is bound")
        return self.workload


@dataclass
class CutLink(Fault):
    """The link between two nodes cut, both ways or one way: broker-broker,
    broker-ZooKeeper or client-broker."""

    kind: ClassVar[str] = "cut-link"
    a: str | None = None
    b: str | None = None
    one_way: bool | None = None
    _added: list[list[str]] = field(default_factory=list, init=False, repr=False)

    def apply(self, cluster: ChaosCluster, rng: random.Random) -> None:
        if self.a is None or self.b is None:
            brokers = cluster.broker_names
            pairs = [(x, y) for x in brokers for y in brokers if x < y]
            pairs += [(x, "zk") for x in brokers]
            pairs += [(c, x) for c in cluster.client_names for x in brokers]
            a, b = rng.choice(pairs)
            self.a, self.b = (a, b) if rng.random() < 0.5 else (b, a)
        if self.one_way is None:
            self.one_way = rng.random() < 0.4
        pairs_ = [(self.a, self.b)] if self.one_way else [(self.a, self.b), (self.b, self.a)]
        self._added = _block(cluster, pairs_)
        arrow = "->" if self.one_way else "<->"
        self.description = f"cut {self.a} {arrow} {self.b}" + (
            f" (one way: {self.b} -> {self.a} flows)" if self.one_way else "")

    def heal(self, cluster: ChaosCluster) -> None:
        _unblock(cluster, self._added)


@dataclass
class IsolateNode(Fault):
    """One node cut off from every other node (the harness still reaches it): a broker,
    ZooKeeper or a client node (``role``: broker, zookeeper, client)."""

    kind: ClassVar[str] = "isolate-node"
    node: str | None = None
    role: str | None = None
    _added: list[list[str]] = field(default_factory=list, init=False, repr=False)

    def apply(self, cluster: ChaosCluster, rng: random.Random) -> None:
        if self.node is None:
            if self.role is None:
                self.role = rng.choice(["broker", "broker", "zookeeper", "client"])
            choices = {"broker": cluster.broker_names, "zookeeper": ["zk"],
                       "client": cluster.client_names}[self.role]
            self.node = rng.choice(choices)
        self._added = _block(cluster, _both_ways(self.node, list(cluster.net.nodes)))
        self.description = f"isolate {self.node} from every other node"

    def heal(self, cluster: ChaosCluster) -> None:
        _unblock(cluster, self._added)


@dataclass
class LeaderFromZooKeeper(Fault):
    """A partition's current leader cut off from ZooKeeper only: the other brokers and
    the clients still reach it (it may go on serving while the controller elects
    another)."""

    kind: ClassVar[str] = "leader-from-zk"
    partition: str | None = None
    broker: int | None = None
    _added: list[list[str]] = field(default_factory=list, init=False, repr=False)

    def apply(self, cluster: ChaosCluster, rng: random.Random) -> None:
        if self.partition is None:
            self.partition = _pick_partition(cluster, rng)
        if self.broker is None:
            self.broker = leader_of(cluster, self.partition)
        name = cluster.node_name(self.broker)
        self._added = _block(cluster, _both_ways(name, ["zk"]))
        self.description = (f"cut {name} <-> zk ({name} led {self.partition}; brokers and "
                            f"clients still reach it)")

    def heal(self, cluster: ChaosCluster) -> None:
        _unblock(cluster, self._added)


@dataclass
class IsolateController(Fault):
    """The controller (as ZooKeeper names it) cut off from every other node."""

    kind: ClassVar[str] = "isolate-controller"
    broker: int | None = None
    _added: list[list[str]] = field(default_factory=list, init=False, repr=False)

    def apply(self, cluster: ChaosCluster, rng: random.Random) -> None:
        if self.broker is None:
            self.broker = controller_of(cluster)
        name = cluster.node_name(self.broker)
        self._added = _block(cluster, _both_ways(name, list(cluster.net.nodes)))
        self.description = f"isolate {name} (the controller) from every other node"

    def heal(self, cluster: ChaosCluster) -> None:
        _unblock(cluster, self._added)


@dataclass
class FollowerFromLeader(Fault):
    """A follower in a partition's ISR cut off from that partition's leader only: it
    still reaches ZooKeeper, the other brokers and the clients. ``adding``: the follower
    is instead a replica a reassignment is adding (in the ISR or not yet)."""

    kind: ClassVar[str] = "follower-from-leader"
    partition: str | None = None
    leader: int | None = None
    follower: int | None = None
    adding: bool = False
    _added: list[list[str]] = field(default_factory=list, init=False, repr=False)

    def apply(self, cluster: ChaosCluster, rng: random.Random) -> None:
        if self.partition is None:
            self.partition = _pick_partition(cluster, rng)
        if self.leader is None or self.follower is None:
            topic, p = split_partition(self.partition)

            def found() -> tuple[int, list[int]] | None:
                state = cluster.partition_state(topic, p)
                if self.adding:
                    candidates = cluster.moving(topic).get(p, ([], []))[0]
                else:
                    candidates = state["isr"]
                others = sorted(int(b) for b in candidates if int(b) != state["leader"])
                return (int(state["leader"]), others) if state["leader"] > 0 and others else None

            what = "a replica being added" if self.adding else "a follower"
            leader, followers = _lookup(found, f"a leader of {self.partition} and {what}")
            self.leader, self.follower = leader, rng.choice(followers)
        a, b = cluster.node_name(self.follower), cluster.node_name(self.leader)
        self._added = _block(cluster, [(a, b), (b, a)])
        role = "is being added to" if self.adding else "follows"
        self.description = (f"cut {a} <-> {b} ({a} {role} {self.partition}, led by {b}; "
                            f"both still reach zk)")

    def heal(self, cluster: ChaosCluster) -> None:
        _unblock(cluster, self._added)


@dataclass
class Split(Fault):
    """The network split in two: a minority of one broker and one client node, and a
    majority of the other brokers, ZooKeeper and the other clients; producers run on both
    sides. ``leader_of``: the minority broker is that partition's leader at apply time
    (else a random broker)."""

    kind: ClassVar[str] = "split"
    leader_of: str | None = None
    minority: list[str] | None = None
    majority: list[str] | None = None
    _added: list[list[str]] = field(default_factory=list, init=False, repr=False)

    def apply(self, cluster: ChaosCluster, rng: random.Random) -> None:
        if self.minority is None or self.majority is None:
            if self.leader_of is not None:
                broker = cluster.node_name(leader_of(cluster, self.leader_of))
            else:
                broker = rng.choice(cluster.broker_names)
            self.minority = [broker, rng.choice(cluster.client_names)]
            self.majority = [n for n in cluster.net.nodes if n not in self.minority]
        pairs = [(a, b) for a in self.minority for b in self.majority]
        self._added = _block(cluster, pairs + [(b, a) for a, b in pairs])
        lead = f" ({self.minority[0]} led {self.leader_of})" if self.leader_of else ""
        self.description = (f"split {{{', '.join(self.minority)}}} | "
                            f"{{{', '.join(self.majority)}}}{lead}")

    def heal(self, cluster: ChaosCluster) -> None:
        _unblock(cluster, self._added)


@dataclass
class PauseBroker(Fault):
    """SIGSTOP a broker; SIGCONT at heal."""

    kind: ClassVar[str] = "pause-broker"
    holds: ClassVar[tuple[float, float]] = (2.0, 15.0)
    category: ClassVar[str] = "broker"
    broker: int | None = None
    leader_of: str | None = None

    def apply(self, cluster: ChaosCluster, rng: random.Random) -> None:
        if self.broker is None:
            self.broker = (leader_of(cluster, self.leader_of) if self.leader_of
                           else _pick_broker(cluster, rng))
        cluster.broker(self.broker).pause()
        self.description = f"SIGSTOP b{self.broker}"

    def heal(self, cluster: ChaosCluster) -> None:
        assert self.broker is not None
        cluster.broker(self.broker).resume()


@dataclass
class KillBroker(Fault):
    """kill -9 a broker (``leader_of``: that partition's leader at apply time); started
    again at heal. ``await_failover``: apply returns once ZooKeeper names another leader
    of ``leader_of`` (at most 60 s)."""

    kind: ClassVar[str] = "kill-broker"
    category: ClassVar[str] = "broker"
    broker: int | None = None
    leader_of: str | None = None
    await_failover: bool = False

    def apply(self, cluster: ChaosCluster, rng: random.Random) -> None:
        if self.broker is None:
            self.broker = (leader_of(cluster, self.leader_of) if self.leader_of
                           else _pick_broker(cluster, rng))
        cluster.broker(self.broker).kill()
        lead = f" (the leader of {self.leader_of})" if self.leader_of else ""
        self.description = f"kill -9 b{self.broker}{lead}"
        if self.await_failover and self.leader_of:
            started = time.monotonic()
            topic, p = split_partition(self.leader_of)
            gone = self.broker
            try:
                new = wait_until(lambda: (lambda x: x if x > 0 and x != gone else None)(
                    cluster.leader(topic, p)), f"a new leader of {self.leader_of}", 60, 0.1)
                self.description += (f"; b{new} leads {self.leader_of} after "
                                     f"{time.monotonic() - started:.1f}s")
            except AssertionError:
                self.description += f"; no new leader of {self.leader_of} within 60s"

    def heal(self, cluster: ChaosCluster) -> None:
        assert self.broker is not None
        b = cluster.broker(self.broker)
        if not b.running:
            b.start(wait=True, timeout=90)


@dataclass
class TerminateBroker(Fault):
    """SIGTERM a broker (it must stop cleanly within 30 s, else it is killed and the
    description says so); started again at heal."""

    kind: ClassVar[str] = "terminate-broker"
    category: ClassVar[str] = "broker"
    broker: int | None = None

    def apply(self, cluster: ChaosCluster, rng: random.Random) -> None:
        if self.broker is None:
            self.broker = _pick_broker(cluster, rng)
        started = time.monotonic()
        status = cluster.broker(self.broker).terminate(timeout=30)
        took = time.monotonic() - started
        self.description = f"SIGTERM b{self.broker}: " + (
            f"exited {status} in {took:.1f}s" if status is not None
            else "did not exit within 30s, killed")

    def heal(self, cluster: ChaosCluster) -> None:
        assert self.broker is not None
        b = cluster.broker(self.broker)
        if not b.running:
            b.start(wait=True, timeout=90)


@dataclass
class RestartZooKeeper(Fault):
    """ZooKeeper killed (kill -9), started again on its data at heal."""

    kind: ClassVar[str] = "restart-zk"
    holds: ClassVar[tuple[float, float]] = (1.0, 10.0)
    category: ClassVar[str] = "zookeeper"

    def apply(self, cluster: ChaosCluster, rng: random.Random) -> None:
        cluster.zookeeper.kill()
        self.description = "kill -9 ZooKeeper"

    def heal(self, cluster: ChaosCluster) -> None:
        if not cluster.zookeeper.running:
            cluster.zookeeper.start()


@dataclass
class PauseZooKeeper(Fault):
    """SIGSTOP ZooKeeper; SIGCONT at heal (sessions whose pings it missed then expire)."""

    kind: ClassVar[str] = "pause-zk"
    holds: ClassVar[tuple[float, float]] = (2.0, 12.0)
    category: ClassVar[str] = "zookeeper"

    def apply(self, cluster: ChaosCluster, rng: random.Random) -> None:
        cluster.zookeeper.pause()
        self.description = "SIGSTOP ZooKeeper"

    def heal(self, cluster: ChaosCluster) -> None:
        cluster.zookeeper.resume()


@dataclass
class FillDisk(Fault):
    """One broker's data filesystem filled to the last byte; freed at heal, and the
    broker started again if the full disk stopped it."""

    kind: ClassVar[str] = "fill-disk"
    needs: ClassVar[frozenset[str]] = frozenset({"disk"})
    category: ClassVar[str] = "broker"
    broker: int | None = None

    def apply(self, cluster: ChaosCluster, rng: random.Random) -> None:
        if self.broker is None:
            self.broker = _pick_broker(cluster, rng)
        b = cluster.broker(self.broker)
        if b.disk.kind == "dir":
            raise FaultSkipped(f"b{self.broker}'s data is not on a filesystem of its own")
        b.disk.fill()
        self.description = f"fill b{self.broker}'s disk ({b.disk.kind}, {b.disk.size_mb} MB)"

    def heal(self, cluster: ChaosCluster) -> None:
        assert self.broker is not None
        b = cluster.broker(self.broker)
        b.disk.free()
        if not b.running:
            b.start(wait=True, timeout=90)


@dataclass
class DelayZooKeeper(Fault):
    """Each direction of one broker's ZooKeeper traffic delayed by ``seconds`` (through
    its proxy); no delay at heal."""

    kind: ClassVar[str] = "delay-zk"
    needs: ClassVar[frozenset[str]] = frozenset({"zk_proxies"})
    category: ClassVar[str] = "broker"
    broker: int | None = None
    seconds: float | None = None

    def apply(self, cluster: ChaosCluster, rng: random.Random) -> None:
        if self.broker is None:
            self.broker = _pick_broker(cluster, rng)
        if self.seconds is None:
            self.seconds = round(rng.uniform(0.5, 4.0), 1)
        cluster.delay_zookeeper(self.broker, self.seconds)
        self.description = f"delay b{self.broker}'s ZooKeeper traffic by {self.seconds}s each way"

    def heal(self, cluster: ChaosCluster) -> None:
        assert self.broker is not None
        cluster.delay_zookeeper(self.broker, 0)


@dataclass
class JumpClock(Fault):
    """One broker's clocks (wall and monotonic, libfaketime) jumped forward by
    ``seconds``; a clock does not go back, so heal does nothing."""

    kind: ClassVar[str] = "clock-jump"
    needs: ClassVar[frozenset[str]] = frozenset({"faketime"})
    holds: ClassVar[tuple[float, float]] = (2.0, 10.0)
    category: ClassVar[str] = "broker"
    broker: int | None = None
    seconds: float | None = None

    def apply(self, cluster: ChaosCluster, rng: random.Random) -> None:
        if self.broker is None:
            self.broker = _pick_broker(cluster, rng)
        if self.seconds is None:
            self.seconds = float(rng.choice([5, 15, 30, 60, 120]))
        b = cluster.broker(self.broker)
        if not b.faketime:
            raise FaultSkipped(f"b{self.broker} runs without libfaketime")
        b.jump_clock(self.seconds)
        self.description = (f"jump b{self.broker}'s clocks forward {self.seconds:.0f}s "
                            f"(now +{b.clock_offset:.0f}s)")


@dataclass
class RestartConsumer(Fault):
    """A consumer worker killed with kill -9, started again (its next incarnation) at
    heal."""

    kind: ClassVar[str] = "restart-consumer"
    needs: ClassVar[frozenset[str]] = frozenset({"workload"})
    holds: ClassVar[tuple[float, float]] = (0.5, 8.0)
    category: ClassVar[str] = "client"
    worker: str | None = None

    def apply(self, cluster: ChaosCluster, rng: random.Random) -> None:
        workload = self._bound()
        if self.worker is None:
            running = sorted(w.id for w in workload.workers.values()
                             if w.kind == "consumer" and w.running)
            if not running:
                raise FaultSkipped("no consumer is running")
            self.worker = rng.choice(running)
        workload.kill(self.worker)
        self.description = f"kill -9 consumer {self.worker}"

    def heal(self, cluster: ChaosCluster) -> None:
        assert self.worker is not None
        self._bound().respawn(self.worker, wait=False)


@dataclass
class TxnCoordinatorCut(Fault):
    """The transaction coordinator of a transactional producer cut off just as that
    producer asks for a commit (``at_commit``: apply waits, at most 20 s, for the next
    ``invoke commit`` in its history). ``mode``: ``isolate`` (from every node: the
    coordinator moves, and the new one must finish or abort what the old one began) or
    ``brokers`` (from the other brokers only: it keeps ZooKeeper and its clients, and
    can neither replicate the commit's state nor write its markers to partitions led
    elsewhere)."""

    kind: ClassVar[str] = "txn-coordinator"
    needs: ClassVar[frozenset[str]] = frozenset({"workload"})
    worker: str | None = None
    mode: str | None = None
    at_commit: bool = True
    broker: int | None = None
    _added: list[list[str]] = field(default_factory=list, init=False, repr=False)

    def apply(self, cluster: ChaosCluster, rng: random.Random) -> None:
        workload = self._bound()
        if self.worker is None:
            txn = sorted(w.id for w in workload.workers.values() if w.kind == "txn")
            if not txn:
                raise FaultSkipped("the workload has no transactional producer")
            self.worker = rng.choice(txn)
        if self.mode is None:
            self.mode = rng.choice(["isolate", "brokers"])
        seen = "no commit seen in 20s"
        if self.at_commit:
            path = workload.out_dir / HISTORY_DIR / f"{self.worker}.jsonl"
            txn_no = _await_commit(path, 20.0)
            if txn_no is not None:
                seen = f"as {self.worker} commits transaction {txn_no}"
        if self.broker is None:
            config = next(iter(cluster.brokers.values())).config
            count = int(config.get("transaction.state.log.num.partitions",
                                   BROKER_CONFIG["transaction.state.log.num.partitions"]))
            slot = partition_for(f"chaos-{self.worker}", count)
            self.broker = leader_of(cluster, f"{TXN_TOPIC}/{slot}")
        name = cluster.node_name(self.broker)
        others = cluster.broker_names if self.mode == "brokers" else list(cluster.net.nodes)
        self._added = _block(cluster, _both_ways(name, others))
        what = "the other brokers" if self.mode == "brokers" else "every other node"
        self.description = (f"cut {name} (transaction coordinator of {self.worker}) off "
                            f"from {what}" + (f", {seen}" if self.at_commit else ""))

    def heal(self, cluster: ChaosCluster) -> None:
        _unblock(cluster, self._added)


# -- reassignments ------------------------------------------------------------------------

# The longest a reassignment fault waits for a reassignment it asked for to complete.
REASSIGN_WAIT_S = 90.0
# How long apply waits for a removal to complete before it goes on without (as the
# second fault of a step, while a broker is down: the first's heal is due meanwhile).
REMOVAL_WAIT_S = 30.0
COMPANION_REMOVAL_WAIT_S = 3.0
# How long an operator's command is tried again (from each client node in turn).
TOOL_RETRY_S = 45.0
COMPANION_TOOL_RETRY_S = 5.0
# How long a broker a removal completed on has, once it is up, to delete its copy
# before the replica is added back at heal.
COPY_GONE_S = 20.0
TOOL_TIMEOUT_S = 20.0
TESTS_DIR = Path(__file__).resolve().parent.parent


class ToolFailed(RuntimeError):
    """An operator's command kept failing from every client node."""


def _operator(cluster: ChaosCluster, first: str, *args: str,
              deadline_s: float = TOOL_RETRY_S) -> dict[str, Any]:
    """Run chaos.reassign_tool with ``args`` in client node ``first``'s namespace, then
    in the others' in turn, until it succeeds or ``deadline_s`` has passed (a cut link
    or a controller moving makes it fail for a while, as it would for an operator).
    It bootstraps from the brokers running and not paused, as an operator would pick
    one that answers. The tool's outcome (chaos.reassign_tool), with the ``node`` it
    succeeded from; ToolFailed with the last error otherwise."""
    import json
    import os
    import subprocess
    import sys

    nodes = [first, *[c for c in cluster.client_names if c != first]]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(TESTS_DIR), env.get("PYTHONPATH", "")) if p)
    deadline = time.monotonic() + deadline_s
    last = "not tried"
    attempt = 0
    while True:
        node = nodes[attempt % len(nodes)]
        attempt += 1
        up = _up_brokers(cluster) or cluster.ids
        bootstrap = ",".join(cluster.broker(i).bootstrap for i in up)
        cmd = [*cluster.net.exec_prefix(node), sys.executable, "-m", "chaos.reassign_tool",
               "--bootstrap", bootstrap, *args]
        try:
            done = subprocess.run(cmd, cwd=TESTS_DIR, env=env, capture_output=True,
                                  timeout=TOOL_TIMEOUT_S, check=False)
            lines = done.stdout.decode(errors="replace").strip().splitlines()
            outcome = json.loads(lines[-1]) if lines else {
                "ok": False, "error": done.stderr.decode(errors="replace")[-300:]}
            if outcome.get("ok"):
                return {**outcome, "node": node}
            last = f"{node}: {outcome.get('error')}"
        except subprocess.TimeoutExpired:
            last = f"{node}: no answer in {TOOL_TIMEOUT_S:g}s"
        except ValueError as exc:
            last = f"{node}: {exc}"
        if time.monotonic() > deadline:
            raise ToolFailed(f"{' '.join(args[:2])}: {last}")
        time.sleep(1.0)


def _await_replicas(cluster: ChaosCluster, key: str, target: list[int],
                    timeout: float) -> float | None:
    """Seconds until ``key``'s replicas are ``target`` with no reassignment in progress
    (ZooKeeper's topic znode), or None if not within ``timeout``."""
    topic, p = split_partition(key)
    started = time.monotonic()

    def done() -> bool:
        return cluster.assignment(topic).get(p) == target and p not in cluster.moving(topic)

    try:
        wait_until(done, f"{key} reassigned to {target}", timeout, 0.2)
    except AssertionError:
        return None
    return time.monotonic() - started


@dataclass
class Reassign(Fault):
    """A partition of the clients' topics reassigned (KIP-455) through the Kafka
    protocol, from a client node, as an operator runs Kafka's tools (chaos.reassign_tool):
    ``mode`` ``drop-add`` removes one replica (``dropped``; the leader's when
    ``drop_leader``), waits (at most 30 s) for the removal to complete, and adds it back,
    so its broker copies the whole log again: at apply (``add_back`` "apply", the copy
    then runs during the hold, at ``throttle`` bytes/s if set, the reassignment tool's
    --throttle) or at heal (``add_back`` "heal": the partition runs one replica short
    meanwhile). ``drop-cancel`` asks for the removal and at once cancels it (a null
    target), racing the controller's completion: if it completed first, the replica is
    added back instead. ``rotate`` reorders the replicas and asks for a preferred leader
    election, so the leadership moves; heal restores the order and the leader. Heal
    lifts the throttle and waits (at most 90 s) for the partition to be back on its
    ``original`` replicas with no reassignment in progress; what each step took is in
    the description. Before a heal adds back a replica whose removal completed at apply,
    it waits (at most 20 s) for that broker, if it is up, to have deleted its copy; one
    still there is written to the harness history (``event stale-copy {partition,
    broker, waited}``), and the checker reports it. ``companion``: the second fault of a
    step, applied while a broker is down, paused or out of disk: it drops that broker's
    replica, waits at most 3 s for the removal, copies unthrottled, and an add-back at
    apply refused for 5 s (its broker not registered) is left to heal."""

    kind: ClassVar[str] = "reassign"
    # Brokers fetch at most 8 KiB of a partition at a time, so a throttled copy spans
    # many fetches (one fetch would otherwise take the whole log of a short run).
    needs: ClassVar[frozenset[str]] = frozenset({"small_fetches"})
    category: ClassVar[str] = "admin"
    partition: str | None = None
    mode: str | None = None
    original: list[int] | None = None
    dropped: int | None = None
    drop_leader: bool = False
    add_back: str | None = None
    throttle: int | None = None
    node: str | None = None
    companion: bool = False
    _throttled: bool = field(default=False, init=False, repr=False)
    # The original replicas were asked for again (a failed apply leaves it to heal).
    _restored: bool = field(default=False, init=False, repr=False)
    # The removal completed at apply.
    _removed: bool = field(default=False, init=False, repr=False)

    def apply(self, cluster: ChaosCluster, rng: random.Random) -> None:
        if self.partition is None:
            self.partition = _pick_partition(cluster, rng)
        topic, p = split_partition(self.partition)
        if self.node is None:
            self.node = rng.choice(cluster.client_names)
        if self.mode is None:
            self.mode = rng.choice(["drop-add", "drop-add", "drop-cancel", "rotate"])
        current = _lookup(lambda: cluster.assignment(topic).get(p), f"{self.partition}'s replicas")
        if p in cluster.moving(topic):
            raise FaultSkipped(f"{self.partition} is being reassigned already")
        if self.original is None:
            self.original = list(current)
        if len(self.original) < 3:
            raise FaultSkipped(f"{self.partition} has {len(self.original)} replicas")
        if self.mode == "rotate":
            self._rotate(cluster, rng)
            return
        if self.dropped is None:
            # The second fault of a step moves the replica of the broker the first took
            # down, froze or filled: an operator's answer to a broker gone, its copy left
            # behind, stale, when it comes back (or undeletable on a full disk).
            down = [b for b in self.original if b not in _up_brokers(cluster)
                    or (cluster.broker(b).disk.kind != "dir" and cluster.broker(b).disk.full)]
            self.dropped = (leader_of(cluster, self.partition) if self.drop_leader
                            else rng.choice(down) if self.companion and down
                            else rng.choice(self.original))
        if self.mode == "drop-cancel":
            self.add_back = "apply"
        if self.add_back is None:
            self.add_back = rng.choice(["apply", "heal"])
        if self.throttle is None:
            self.throttle = (rng.choice([0, 2048, 8192])
                             if self.add_back == "apply" and not self.companion else 0)
        kept = [b for b in self.original if b != self.dropped]
        self._first_alter(cluster, kept)
        if self.mode == "drop-cancel":
            self._cancel(cluster, kept)
            return
        wait = COMPANION_REMOVAL_WAIT_S if self.companion else REMOVAL_WAIT_S
        took = _await_replicas(cluster, self.partition, kept, wait)
        self._removed = took is not None
        self.description += (f"reassign {self.partition} {self.original} -> {kept} (from "
                            f"{self.node}): " + (f"b{self.dropped}'s replica removed in "
                                                 f"{took:.1f}s" if took is not None else
                                                 f"removal not done in {wait:g}s"))
        if self.add_back == "apply":
            self._add_back(cluster)
        else:
            self.description += f"; b{self.dropped} added back at heal"

    def _alter(self, cluster: ChaosCluster, replicas: list[int]) -> None:
        assert self.partition is not None and self.node is not None
        _operator(cluster, self.node, "alter", self.partition,
                  ",".join(str(b) for b in replicas))

    def _first_alter(self, cluster: ChaosCluster, replicas: list[int]) -> None:
        """The fault's first request. When it fails and ZooKeeper shows it took no
        effect, the fault is skipped; when it may have (an answer lost), the fault goes
        on, and its heal puts the original replicas back. From here on apply raises
        nothing: what fails is said in the description and left to heal, so a second
        fault's apply never holds the runner (and the first fault's heal) up."""
        assert self.partition is not None and self.original is not None
        deadline = COMPANION_TOOL_RETRY_S if self.companion else TOOL_RETRY_S
        assert self.node is not None
        try:
            _operator(cluster, self.node, "alter", self.partition,
                      ",".join(str(b) for b in replicas), deadline_s=deadline)
        except ToolFailed as exc:
            topic, p = split_partition(self.partition)
            try:
                untouched = (cluster.assignment(topic).get(p) == self.original
                             and p not in cluster.moving(topic))
            except Exception:  # noqa: BLE001 - ZooKeeper not answering: it may have
                untouched = False
            if untouched:
                raise FaultSkipped(f"the operator's reassignment failed: {exc}") from None
            self.description = f"(reassignment asked, its answer lost: {exc}) "

    def _cancel(self, cluster: ChaosCluster, kept: list[int]) -> None:
        """Cancel the removal just asked for; if the controller completed it first, add
        the replica back. Either way the replicas may end in another order than at
        first (a cancel keeps the reassignment's): heal asks for the original order."""
        assert self.partition is not None and self.original is not None
        assert self.node is not None
        self.description += (f"reassign {self.partition} {self.original} -> {kept} (from "
                             f"{self.node}), then cancel")
        deadline = COMPANION_TOOL_RETRY_S if self.companion else TOOL_RETRY_S
        try:
            outcome = _operator(cluster, self.node, "cancel", self.partition,
                                ",".join(map(str, self.original)), deadline_s=deadline)
        except ToolFailed as exc:
            self.description += f": failed ({exc}), left to heal"
            return
        self.description += (": cancelled" if outcome.get("done") == "cancelled" else
                             f": the removal had completed, b{self.dropped} added back")

    def _throttle_args(self) -> list[str]:
        assert self.partition is not None and self.original is not None
        kept = [b for b in self.original if b != self.dropped]
        return [self.partition, "--leaders", ",".join(map(str, kept)),
                "--followers", str(self.dropped),
                "--brokers", ",".join(map(str, self.original))]

    def _add_back(self, cluster: ChaosCluster) -> None:
        assert self.original is not None and self.node is not None
        assert self.partition is not None
        deadline = COMPANION_TOOL_RETRY_S if self.companion else TOOL_RETRY_S
        try:
            if self.throttle:
                self._throttled = True  # heal lifts it, whatever part of it was set
                _operator(cluster, self.node, "throttle", *self._throttle_args(),
                          "--rate", str(self.throttle), deadline_s=deadline)
            _operator(cluster, self.node, "alter", self.partition,
                      ",".join(str(b) for b in self.original), deadline_s=deadline)
        except ToolFailed as exc:
            self.description += f"; adding b{self.dropped} back failed ({exc}), left to heal"
            return
        self._restored = True
        rate = f" at {self.throttle} B/s" if self.throttle else ""
        self.description += f"; b{self.dropped} added back{rate} -> {self.original}"

    def _rotate(self, cluster: ChaosCluster, rng: random.Random) -> None:
        assert self.original is not None and self.partition is not None
        assert self.node is not None
        k = rng.randrange(1, len(self.original))
        rotated = self.original[k:] + self.original[:k]
        self._first_alter(cluster, rotated)
        wait = COMPANION_REMOVAL_WAIT_S if self.companion else REMOVAL_WAIT_S
        took = _await_replicas(cluster, self.partition, rotated, wait)
        self.description += (f"reassign {self.partition} {self.original} -> {rotated} (from "
                             f"{self.node}), " + ("done" if took is not None else "not done"))
        try:
            _operator(cluster, self.node, "elect", self.partition,
                      deadline_s=COMPANION_TOOL_RETRY_S if self.companion else TOOL_RETRY_S)
            topic, p = split_partition(self.partition)
            self.description += f", preferred election: b{cluster.leader(topic, p)} leads"
        except Exception as exc:  # noqa: BLE001 - said; the heal elects again
            self.description += f", preferred election failed ({exc})"

    def heal(self, cluster: ChaosCluster) -> None:
        assert self.original is not None and self.partition is not None
        assert self.node is not None
        started = time.monotonic()
        if self._removed and not self._restored:
            self._check_copy_gone(cluster)
        try:
            if not self._restored:
                self._alter(cluster, self.original)
                self._restored = True
        finally:
            if self._throttled:
                _operator(cluster, self.node, "unthrottle", *self._throttle_args())
                self._throttled = False
        took = _await_replicas(cluster, self.partition, self.original, REASSIGN_WAIT_S)
        if self.mode == "rotate":
            _operator(cluster, self.node, "elect", self.partition)
        if took is None:
            raise ToolFailed(f"{self.partition} not back on {self.original} with no "
                             f"reassignment in progress {REASSIGN_WAIT_S:g}s after its heal")
        self.description += f"; healed: on {self.original} after " \
                            f"{time.monotonic() - started:.1f}s"


    def _check_copy_gone(self, cluster: ChaosCluster) -> None:
        """The broker whose replica was removed holds no copy of it any more (if it is up
        to delete it); else an event for the checker."""
        assert self.partition is not None and self.dropped is not None
        if self.dropped not in _up_brokers(cluster):
            return
        topic, p = split_partition(self.partition)
        copy = cluster.partition_dir(self.dropped, topic, p)
        started = time.monotonic()
        with contextlib.suppress(AssertionError):
            wait_until(lambda: not copy.exists(), f"b{self.dropped}'s copy deleted",
                       COPY_GONE_S, 0.2)
            return
        waited = round(time.monotonic() - started, 1)
        self.description += f"; b{self.dropped} still held its copy after {waited:g}s"
        if self.workload is not None and self.workload.harness is not None:
            self.workload.harness.event("stale-copy", partition=self.partition,
                                        broker=self.dropped, waited=waited)


def _await_commit(path: Path, timeout: float) -> int | None:
    """The transaction number of the next ``invoke commit`` line written to ``path``
    (None if none within ``timeout``)."""
    import json

    deadline = time.monotonic() + timeout
    with contextlib.suppress(FileNotFoundError), open(path, encoding="utf-8") as f:
        f.seek(0, 2)
        partial = ""
        while time.monotonic() < deadline:
            chunk = f.readline()
            if not chunk:
                time.sleep(0.003)
                continue
            partial += chunk
            if not partial.endswith("\n"):
                continue
            line, partial = partial, ""
            with contextlib.suppress(ValueError):
                e = json.loads(line)
                if e.get("type") == "invoke" and e.get("op") == "commit":
                    return int(e.get("txn", -1))
    return None


KINDS: dict[str, type[Fault]] = {
    cls.kind: cls for cls in (
        CutLink, IsolateNode, LeaderFromZooKeeper, IsolateController, FollowerFromLeader,
        Split, PauseBroker, KillBroker, TerminateBroker, RestartZooKeeper, PauseZooKeeper,
        FillDisk, DelayZooKeeper, JumpClock, RestartConsumer, TxnCoordinatorCut, Reassign,
    )
}


def unavailable_kinds(features: set[str]) -> dict[str, str]:
    """Kinds this machine or cluster cannot host, with why; ``features``: what the cluster
    has (``disk``, ``zk_proxies``, ``faketime``, ``workload``, ``small_fetches``)."""
    out = {}
    for kind, cls in KINDS.items():
        missing = cls.needs - features
        if "faketime" in missing and not faketime_available():
            out[kind] = "libfaketime is not installed (Debian package faketime)"
        elif missing:
            out[kind] = f"the cluster has no {', '.join(sorted(missing))}"
    return out


def heal_all(cluster: ChaosCluster, workload: Workload | None = None) -> list[str]:
    """Everything back: the network whole, ZooKeeper resumed and running, no ZooKeeper
    delay, every broker resumed with its disk freed and running, every consumer running.
    What it had to do, one line each; raises only when a broker cannot be started."""
    done: list[str] = []
    if cluster.net.blocked:
        done.append(f"network healed ({len(cluster.net.blocked)} blocked directions)")
    cluster.net.heal()
    cluster.zookeeper.resume()
    if not cluster.zookeeper.running:
        cluster.zookeeper.start()
        done.append("ZooKeeper started")
    if cluster.zk_proxies:
        for i in cluster.ids:
            cluster.delay_zookeeper(i, 0)
    for i, b in sorted(cluster.brokers.items()):
        if b.paused:
            done.append(f"b{i} resumed")
        b.resume()
        if b.disk.kind != "dir" and b.disk.full:
            b.disk.free()
            done.append(f"b{i}'s disk freed")
    for i, b in sorted(cluster.brokers.items()):
        if not b.running:
            b.start(wait=False)
            done.append(f"b{i} started")
    for b in cluster.brokers.values():
        b.wait_ready(90)
    if workload is not None:
        for w in workload.workers.values():
            if w.kind == "consumer" and not w.running:
                workload.respawn(w.id, wait=False)
                done.append(f"consumer {w.id} started")
    return done
