"""A private network of Linux network namespaces, whose links the harness cuts and heals
while every process keeps running.

Layout: one namespace per node (ZooKeeper, each broker, each client side), each joined
by its own veth pair to a hub namespace that routes between them, and one more veth from
the hub to the namespace the harness itself runs in, so the test process reaches every
node. Node ``n`` (index 1..) has the address ``10.<net>.<n>.2/24``, the hub ``.1`` on
that link; the harness side is ``10.<net>.0.2``. Several networks may exist at once
(tests running side by side): each claims a slot, which gives it its names and its
``<net>``.

A cut is a policy rule in the hub, ``ip rule add from A to B blackhole``: the hub drops
A's packets to B silently, as a broken switch would (no reset, no ICMP, so a connect
hangs and a connection stalls rather than failing fast). A rule per direction lets a
link be cut one way only. This kernel has no ``tc netem`` and no netfilter tools by
default; a blackhole route inside a node (``ip route add blackhole``) was tried too,
but it fails the node's own sends at once with EINVAL, which is not what a partition
looks like. Latency comes from a delaying proxy instead (chaos.proxy).

Nothing leaves the machine: the addresses are private, the hub routes only between
its own links, and teardown deletes every namespace and link it made. The harness's
namespace also gets an ``unreachable`` route for the whole private range, left in place
after teardown: a client that outlives the network then fails at once instead of
following the default route off the machine. Needs root.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from typing import IO

log = logging.getLogger("chaos.net")

# Rules are added at this priority, before the main table's lookup (32766).
RULE_PRIORITY = 100
# Networks that may exist at once on one machine, each with its own name prefix
# (ck<slot>-...) and address range (10.<200+slot>.0.0/16), held by a lock file.
SLOTS = 16
LOCK_DIR = "/run/lock"


class NetworkError(RuntimeError):
    pass


def ip(*args: str, netns: str | None = None, check: bool = True) -> str:
    cmd = ["ip", *(("-n", netns) if netns else ()), *args]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if check and done.returncode != 0:
        raise NetworkError(f"{' '.join(cmd)}: {done.stderr.strip()}")
    return done.stdout


def usable() -> str | None:
    """Why this machine cannot host the network (None when it can)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    try:
        subprocess.run(["ip", "-V"], capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return "iproute2 (`ip`) is not installed"
    probe = f"ckprobe{os.getpid() % 100000}"
    try:
        ip("netns", "add", probe)
    except NetworkError as exc:
        return f"cannot create a network namespace: {exc}"
    ip("netns", "del", probe, check=False)
    return None


@dataclass(frozen=True)
class Node:
    name: str
    index: int
    netns: str
    address: str


def claim_slot() -> tuple[int, IO[str]]:
    """A free slot and its lock file, held open (and locked) for the network's life."""
    os.makedirs(LOCK_DIR, exist_ok=True)
    for slot in range(SLOTS):
        f = open(os.path.join(LOCK_DIR, f"chronik-chaos-{slot}.lock"), "w")  # noqa: SIM115
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            f.close()
            continue
        return slot, f
    raise NetworkError(f"all {SLOTS} chaos network slots are in use")


class Network:
    """Nodes by name; ``cut``/``isolate``/``split`` drop traffic, ``heal`` restores it."""

    def __init__(self, names: Iterable[str]) -> None:
        self.slot, self._lock = claim_slot()
        self.prefix = f"ck{self.slot}"
        self.net = 200 + self.slot
        prefix, net = self.prefix, self.net
        self.hub = f"{prefix}-hub"
        self.nodes: dict[str, Node] = {}
        for index, name in enumerate(names, start=1):
            self.nodes[name] = Node(name, index, f"{prefix}-{name}", f"10.{net}.{index}.2")
        self.harness_address = f"10.{net}.0.2"
        self._root_link = f"{prefix}-root"
        self._blocked: set[tuple[str, str]] = set()
        self._up = False

    # -- lifecycle --------------------------------------------------------------------

    def create(self) -> Network:
        self.destroy_leftovers()
        try:
            ip("netns", "add", self.hub)
            ip("link", "set", "lo", "up", netns=self.hub)
            subprocess.run(
                ["ip", "netns", "exec", self.hub, "sysctl", "-qw", "net.ipv4.ip_forward=1"],
                check=True, capture_output=True,
            )
            for node in self.nodes.values():
                self._add_node(node)
            self._add_harness_link()
        except Exception:
            self.destroy()
            raise
        self._up = True
        return self

    def _add_node(self, node: Node) -> None:
        ip("netns", "add", node.netns)
        ip("link", "set", "lo", "up", netns=node.netns)
        hub_side = f"{self.prefix}-h{node.index}"
        ip("link", "add", hub_side, "type", "veth", "peer", "name", "eth0", "netns", node.netns)
        ip("link", "set", hub_side, "netns", self.hub)
        ip("addr", "add", f"10.{self.net}.{node.index}.1/24", "dev", hub_side, netns=self.hub)
        ip("link", "set", hub_side, "up", netns=self.hub)
        ip("addr", "add", f"{node.address}/24", "dev", "eth0", netns=node.netns)
        ip("link", "set", "eth0", "up", netns=node.netns)
        ip("route", "add", "default", "via", f"10.{self.net}.{node.index}.1", netns=node.netns)

    def _add_harness_link(self) -> None:
        hub_side = f"{self.prefix}-h0"
        ip("link", "add", self._root_link, "type", "veth", "peer", "name", hub_side,
           "netns", self.hub)
        ip("addr", "add", f"{self.harness_address}/24", "dev", self._root_link)
        ip("link", "set", self._root_link, "up")
        ip("addr", "add", f"10.{self.net}.0.1/24", "dev", hub_side, netns=self.hub)
        ip("link", "set", hub_side, "up", netns=self.hub)
        ip("route", "replace", "unreachable", f"10.{self.net}.0.0/16", "metric", "4000")
        ip("route", "add", f"10.{self.net}.0.0/16", "via", f"10.{self.net}.0.1")

    def destroy(self) -> None:
        """Every namespace and link of this network; safe to call twice."""
        self._up = False
        self._blocked.clear()
        ip("route", "del", f"10.{self.net}.0.0/16", "via", f"10.{self.net}.0.1", check=False)
        ip("link", "del", self._root_link, check=False)
        for node in self.nodes.values():
            ip("netns", "del", node.netns, check=False)
        ip("netns", "del", self.hub, check=False)

    def release(self) -> None:
        """Tear down and give the slot back."""
        self.destroy()
        if not self._lock.closed:
            self._lock.close()

    def destroy_leftovers(self) -> None:
        """Namespaces of an earlier run with this prefix that did not tear down (killed)."""
        listing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        # The slot's lock is ours: namespaces with its prefix are a dead run's.
        stale = [line.split()[0] for line in listing.splitlines()
                 if line.split() and line.split()[0].startswith(f"{self.prefix}-")]
        if stale:
            log.info("removing namespaces left by an earlier run: %s", ", ".join(stale))
        ip("route", "del", f"10.{self.net}.0.0/16", "via", f"10.{self.net}.0.1", check=False)
        ip("link", "del", self._root_link, check=False)
        for name in stale:
            ip("netns", "del", name, check=False)

    def __enter__(self) -> Network:
        return self.create()

    def __exit__(self, *exc: object) -> None:
        self.release()

    # -- where things are ---------------------------------------------------------------

    def address(self, name: str) -> str:
        return self.nodes[name].address

    def netns(self, name: str) -> str:
        return self.nodes[name].netns

    def exec_prefix(self, name: str) -> list[str]:
        """The command prefix that runs a program inside node ``name``'s namespace
        (``ip netns exec`` execs it: the pid is the program's own)."""
        return ["ip", "netns", "exec", self.netns(name)]

    # -- faults ---------------------------------------------------------------------------

    @property
    def blocked(self) -> set[tuple[str, str]]:
        """(from, to) pairs whose packets the hub drops now."""
        return set(self._blocked)

    def _rule(self, verb: str, src: str, dst: str) -> None:
        ip("rule", verb, "from", self.address(src), "to", self.address(dst),
           "priority", str(RULE_PRIORITY), "blackhole", netns=self.hub, check=verb == "add")

    def block(self, src: str, dst: str) -> None:
        """Drop what ``src`` sends to ``dst`` (one direction)."""
        if (src, dst) in self._blocked or src == dst:
            return
        self._rule("add", src, dst)
        self._blocked.add((src, dst))

    def unblock(self, src: str, dst: str) -> None:
        if (src, dst) not in self._blocked:
            return
        self._rule("del", src, dst)
        self._blocked.discard((src, dst))

    def cut(self, a: str, b: str, one_way: bool = False) -> None:
        """Cut the link between ``a`` and ``b``; with ``one_way`` only a -> b."""
        self.block(a, b)
        if not one_way:
            self.block(b, a)

    def isolate(self, name: str, spare: Iterable[str] = ()) -> None:
        """Cut ``name`` off from every other node but those in ``spare``."""
        keep = set(spare)
        for other in self.nodes:
            if other != name and other not in keep:
                self.cut(name, other)

    def split(self, side_a: Iterable[str], side_b: Iterable[str]) -> None:
        """No traffic between the two sides; within each side all flows."""
        side_b = list(side_b)
        for a in side_a:
            for b in side_b:
                self.cut(a, b)

    def heal(self) -> None:
        for src, dst in sorted(self._blocked):
            self._rule("del", src, dst)
        self._blocked.clear()
        # Whatever a crashed earlier call may have left behind.
        with contextlib.suppress(NetworkError):
            for line in ip("rule", "list", netns=self.hub).splitlines():
                if line.startswith(f"{RULE_PRIORITY}:"):
                    spec = line.split(":", 1)[1].split()
                    ip("rule", "del", *spec, "priority", str(RULE_PRIORITY), netns=self.hub,
                       check=False)
