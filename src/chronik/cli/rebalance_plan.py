"""Where each partition's replicas should live so the brokers share them evenly, found by
moving as little data as possible: pure logic, no I/O (`chronik cluster rebalance` and
`chronik cluster decommission` feed it what the cluster reports).

Even means each topic's replicas spread over the brokers (a topic's traffic goes where
its replicas are: a new broker should take a share of every topic, not only of the
emptiest partitions), and the brokers' totals too. The plan is built in steps, each
keeping what the one before achieved:

1. Replicas on a broker that must be emptied (decommissioned, or not among the brokers
   given) move, each to the broker that can take it (not already a replica of the
   partition, its rack best spreading the partition's racks) holding fewest replicas
   of the topic, then fewest in all; the partitions with fewest choices go first.
2. With racks, a partition on fewer racks than it could span (min(replicas, racks))
   moves a replica from a doubled rack to a rack it lacks.
3. Topic by topic, while a broker holds two or more of the topic's replicas more than
   another, one moves from a fullest broker to an emptiest one (when no replica may go
   there directly: to the next emptiest, through a chain of brokers, or from the next
   fullest); among equal choices, from the broker holding most in all to the one
   holding fewest, and the smallest replica (a follower before a leader at equal size).
   Without racks each move takes away one replica too many or fills one missing, so a
   topic's moves are the fewest that balance it.
4. While the totals differ by two or more, a replica moves from a fuller broker to an
   emptier one, of a topic the first holds more of than the second (so no topic gets
   less even). Steps 3 and 4 take turns until neither finds a move: each move makes
   the topics more even, or keeps them and makes the totals more even, so they end.
5. Leaders (the first replica of each partition, Kafka's preferred leader) are balanced
   the same two ways, per topic and then in all, by reordering replica lists, which
   moves no data: a chain of partitions hands one leadership each from a broker leading
   too many towards one leading too few.

Counts end within one of each other when racks allow it (every partition keeps its
replication factor, no broker twice in a partition); a cluster already balanced gets an
empty plan. `minimum_moved` is a lower bound of the data any plan balancing the counts
must move, per topic and in all: each broker's smallest surplus replicas, or each short
broker's smallest missing ones, with the brokers allowed one replica above the mean
chosen to make that least.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

TopicPartition = tuple[str, int]
# Rounds of the per-topic and overall balancing end when one finds nothing to do (they
# must: see step 4); this bounds them all the same.
PASSES = 100


class PlanError(ValueError):
    """The partitions cannot be placed on the brokers given."""


@dataclass(frozen=True)
class Move:
    partition: TopicPartition
    source: int
    destination: int
    size: int


@dataclass
class Plan:
    """`proposed` holds only the partitions whose replica list changes (moved replicas or
    a new order); `moves` the replicas that must be copied to another broker."""

    current: dict[TopicPartition, list[int]]
    proposed: dict[TopicPartition, list[int]]
    moves: list[Move] = field(default_factory=list)
    minimum_moved: int = 0
    replicas_before: dict[int, int] = field(default_factory=dict)
    replicas_after: dict[int, int] = field(default_factory=dict)
    leaders_before: dict[int, int] = field(default_factory=dict)
    leaders_after: dict[int, int] = field(default_factory=dict)

    @property
    def moved(self) -> int:
        return sum(m.size for m in self.moves)

    @property
    def empty(self) -> bool:
        return not self.proposed

    def final(self) -> dict[TopicPartition, list[int]]:
        return {**self.current, **self.proposed}


def racks_in_use(brokers: Mapping[int, str | None]) -> dict[int, str] | None:
    """The racks to plan with: all brokers' racks, or None when no broker has one.
    Some with and some without is an error, as in Kafka's tools."""
    racks = {b: r for b, r in brokers.items() if r is not None}
    if not racks:
        return None
    if len(racks) != len(brokers):
        missing = sorted(b for b, r in brokers.items() if r is None)
        raise PlanError(
            "Not all brokers have rack information (none for broker"
            f"{'s' if len(missing) > 1 else ''} {','.join(map(str, missing))}); "
            "use --disable-rack-aware to plan without racks"
        )
    return racks


def plan(
    assignment: Mapping[TopicPartition, Sequence[int]],
    brokers: Mapping[int, str | None],
    sizes: Mapping[TopicPartition, int] | None = None,
    empty: Collection[int] = (),
    balance: bool = True,
    rack_aware: bool = True,
) -> Plan:
    """A plan placing `assignment`'s replicas on `brokers` (id -> rack or None).

    Replicas on `empty` brokers and (with `balance`) on brokers not in `brokers` all
    move. With `balance` False only those on `empty` brokers move (decommissioning moves
    nothing else), still to the brokers holding fewest, and only the partitions moving
    are reordered for leaders.
    Racks count when `rack_aware` and every broker has one."""
    sizes = sizes or {}
    targets = sorted(b for b in brokers if b not in set(empty))
    if not targets:
        raise PlanError("no broker left to hold the replicas")
    racks = racks_in_use({b: brokers[b] for b in targets}) if rack_aware else None
    work = _Work(assignment, targets, racks, sizes)
    for tp, replicas in work.current.items():
        if len(replicas) > len(targets):
            raise PlanError(
                f"partition {tp[0]}-{tp[1]} has {len(replicas)} replicas but only "
                f"{len(targets)} broker{'s' if len(targets) != 1 else ''} would hold replicas"
            )
        if len(set(replicas)) != len(replicas):
            raise PlanError(f"partition {tp[0]}-{tp[1]} names a broker twice: {replicas}")
    minimum = work.minimum_moved()
    work.evacuate(set(empty) | ({b for r in work.current.values() for b in r}
                                - work.target_set if balance else set()))
    if balance:
        work.spread_racks()
    # A pass of one goal can open moves to the other (a topic stuck on its racks freed
    # by a move for the totals): passes until one changes nothing.
    for _ in range(PASSES):
        before = {tp: tuple(r) for tp, r in work.replicas.items()}
        for topic in work.topics:
            work.balance_topic(topic, only_new=not balance)
        work.balance_totals(only_new=not balance)
        if all(tuple(r) == before[tp] for tp, r in work.replicas.items()):
            break
    work.balance_leaders(only_moved=not balance)
    proposed = {tp: r for tp, r in work.replicas.items() if r != work.current[tp]}
    moves = work.copies()
    return Plan(
        current={tp: list(r) for tp, r in work.current.items()},
        proposed=proposed,
        moves=moves,
        minimum_moved=minimum if balance else sum(m.size for m in moves),
        replicas_before=_counts(work.current, targets, all_positions=True),
        replicas_after=_counts(work.replicas, targets, all_positions=True),
        leaders_before=_counts(work.current, targets, all_positions=False),
        leaders_after=_counts(work.replicas, targets, all_positions=False),
    )


def _counts(
    assignment: Mapping[TopicPartition, Sequence[int]], brokers: Sequence[int],
    all_positions: bool,
) -> dict[int, int]:
    counts = dict.fromkeys(brokers, 0)
    for replicas in assignment.values():
        for broker in replicas if all_positions else replicas[:1]:
            counts[broker] = counts.get(broker, 0) + 1
    return counts



Entry = tuple[int, int, TopicPartition]  # (size, 1 if the leader's replica, partition)


class _Work:
    """The assignment being changed. Each (topic, broker) keeps its replicas sorted by
    Entry, so the cheapest replica that may move is found first."""

    def __init__(
        self,
        assignment: Mapping[TopicPartition, Sequence[int]],
        targets: list[int],
        racks: dict[int, str] | None,
        sizes: Mapping[TopicPartition, int],
    ) -> None:
        self.current = {tp: list(r) for tp, r in sorted(assignment.items())}
        self.replicas = {tp: list(r) for tp, r in self.current.items()}
        self.targets = targets
        self.target_set = set(targets)
        self.racks = racks
        self.rack_count = len(set(racks.values())) if racks else 0
        self.sizes = {tp: max(0, int(sizes.get(tp, 0))) for tp in self.current}
        self.topics = sorted({t for t, _ in self.current})
        self.partitions: dict[str, list[TopicPartition]] = {t: [] for t in self.topics}
        for tp in self.current:
            self.partitions[tp[0]].append(tp)
        self.held: dict[tuple[str, int], list[Entry]] = {}
        self.total = dict.fromkeys(targets, 0)
        for tp, replicas in self.replicas.items():
            for position, broker in enumerate(replicas):
                if broker in self.target_set:
                    self.held.setdefault((tp[0], broker), []).append(self._key(tp, position))
                    self.total[broker] += 1
        for entries in self.held.values():
            entries.sort()
        # (topic, source, destination, only_new) found to have no replica that may
        # move: not searched again until a move makes one of the source's replicas of
        # the topic movable (only the moved partition's eligibility can change).
        self.no_move: set[tuple[str, int, int, bool]] = set()

    def _key(self, tp: TopicPartition, position: int) -> Entry:
        return (self.sizes[tp], 1 if position == 0 else 0, tp)

    def count(self, topic: str, broker: int) -> int:
        return len(self.held.get((topic, broker), ()))

    # --- racks ----------------------------------------------------------------------

    def spread(self, replicas: Sequence[int]) -> int:
        """How many racks the replicas span (0 without racks)."""
        if self.racks is None:
            return 0
        return len({self.racks[b] for b in replicas if b in self.racks})

    def wanted_spread(self, replicas: Sequence[int]) -> int:
        return min(len(replicas), self.rack_count) if self.racks else 0

    def _spread_after(self, tp: TopicPartition, source: int, destination: int) -> int:
        return self.spread([destination if b == source else b for b in self.replicas[tp]])

    def _keeps_racks(self, tp: TopicPartition, source: int, destination: int) -> bool:
        """A move may not lower the racks a partition spans below what it should span."""
        if self.racks is None or self.racks[source] == self.racks.get(destination):
            return True
        replicas = self.replicas[tp]
        return self._spread_after(tp, source, destination) >= min(
            self.wanted_spread(replicas), self.spread(replicas)
        )

    # --- moving ---------------------------------------------------------------------

    def _movable(self, tp: TopicPartition, source: int, destination: int, only_new: bool) -> bool:
        if only_new and source in self.current[tp]:
            return False
        return destination not in self.replicas[tp] and self._keeps_racks(tp, source,
                                                                          destination)

    def _move(self, tp: TopicPartition, source: int, destination: int) -> None:
        topic = tp[0]
        replicas = self.replicas[tp]
        position = replicas.index(source)
        if source in self.target_set:
            self.held[(topic, source)].remove(self._key(tp, position))
            self.total[source] -= 1
        replicas[position] = destination
        bisect.insort(self.held.setdefault((topic, destination), []), self._key(tp, position))
        self.total[destination] += 1
        if self.no_move:
            for holder in replicas:
                for other in self.targets:
                    for only_new in (False, True):
                        key = (topic, holder, other, only_new)
                        if key in self.no_move and self._movable(tp, holder, other, only_new):
                            self.no_move.discard(key)

    def _cheapest(self, topic: str, source: int, destination: int, only_new: bool) -> Entry | None:
        key = (topic, source, destination, only_new)
        if key in self.no_move:
            return None
        for entry in self.held.get((topic, source), ()):
            if self._movable(entry[2], source, destination, only_new):
                return entry
        self.no_move.add(key)
        return None

    def copies(self) -> list[Move]:
        """The replicas a broker must copy: each broker new to a partition, paired with
        one that leaves it (a replica moved twice is one copy)."""
        moves = []
        for tp, replicas in self.replicas.items():
            original = self.current[tp]
            added = [b for b in replicas if b not in original]
            removed = [b for b in original if b not in replicas]
            moves += [Move(tp, s, d, self.sizes[tp]) for s, d in zip(removed, added, strict=True)]
        return moves

    def evacuate(self, leaving: set[int]) -> None:
        """Step 1: every replica on a leaving broker moves, the partitions with the
        fewest brokers to go to first."""
        order = sorted(self.replicas, key=lambda tp: (-len(self.replicas[tp]), tp))
        for tp in order:
            for broker in [b for b in self.replicas[tp] if b in leaving]:
                choices = [d for d in self.targets if d not in self.replicas[tp]]
                destination = min(choices, key=lambda d: (
                    -self._spread_after(tp, broker, d), self.count(tp[0], d), self.total[d], d
                ))
                self._move(tp, broker, destination)

    def spread_racks(self) -> None:
        """Step 2: partitions on too few racks take a rack they lack."""
        if self.racks is None:
            return
        racks = self.racks
        for tp, replicas in self.replicas.items():
            while self.spread(replicas) < self.wanted_spread(replicas):
                used: dict[str, list[int]] = {}
                for b in replicas:
                    used.setdefault(racks[b], []).append(b)
                doubled = [b for members in used.values() if len(members) > 1 for b in members]
                free = [d for d in self.targets if racks[d] not in used]
                if not doubled or not free:
                    break
                topic = tp[0]
                source = max(doubled, key=lambda b: (self.count(topic, b), self.total[b], b))
                destination = min(free, key=lambda d: (self.count(topic, d), self.total[d], d))
                self._move(tp, source, destination)

    def balance_topic(self, topic: str, only_new: bool = False) -> None:
        """Step 3 for one topic (with `only_new`, only replicas this plan placed move:
        where step 1 put a leaving broker's replicas is revised, nothing else moves).
        Every move goes from a broker holding `level` to one holding at most level - 2,
        which brings the counts closer together, so it ends."""
        while True:
            counts = {b: self.count(topic, b) for b in self.targets}
            if max(counts.values()) - min(counts.values()) <= 1:
                return
            if not any(self._topic_step(topic, level, counts, only_new)
                       for level in sorted(set(counts.values()), reverse=True)):
                return  # the racks (or the partitions' other replicas) allow no better

    def _topic_step(self, topic: str, level: int, counts: dict[int, int], only_new: bool) -> bool:
        sources = sorted((b for b in self.targets if counts[b] == level),
                         key=lambda b: (-self.total[b], b))
        destinations = [b for b in self.targets if counts[b] <= level - 2]
        if not destinations:
            return False
        for below in sorted({counts[d] for d in destinations}):
            best: tuple[tuple[int, int, Entry], int, int] | None = None
            for source in sources:
                for destination in (d for d in destinations if counts[d] == below):
                    entry = self._cheapest(topic, source, destination, only_new)
                    if entry is None:
                        continue
                    rank = (-self.total[source], self.total[destination], entry)
                    if best is None or rank < best[0]:
                        best = (rank, source, destination)
            if best is not None:
                rank, source, destination = best
                self._move(rank[2][2], source, destination)
                return True
        chain = self._chain(topic, sources, counts, level, only_new)
        if chain is None:
            return False
        for tp, source, destination in chain:
            self._move(tp, source, destination)
        return True

    def _chain(
        self, topic: str, sources: list[int], counts: dict[int, int], level: int,
        only_new: bool,
    ) -> list[tuple[TopicPartition, int, int]] | None:
        """When no replica of a fullest broker may go to an emptier one directly: the
        shortest chain of moves a -> b -> ... -> z (each broker between giving one and
        taking one) ending at a broker holding at most level - 2."""
        back: dict[int, tuple[int, TopicPartition] | None] = dict.fromkeys(sources)
        queue = deque(sources)
        while queue:
            broker = queue.popleft()
            for other in self.targets:
                if other in back:
                    continue
                entry = self._cheapest(topic, broker, other, only_new)
                if entry is None:
                    continue
                back[other] = (broker, entry[2])
                if counts[other] <= level - 2:
                    steps: list[tuple[TopicPartition, int, int]] = []
                    node = other
                    while back[node] is not None:
                        previous, tp = back[node]  # type: ignore[misc]
                        steps.append((tp, previous, node))
                        node = previous
                    steps.reverse()
                    # Each step was checked on the assignment before the chain; one
                    # partition twice in it could make a later step invalid.
                    if len({tp for tp, _, _ in steps}) != len(steps):
                        return None
                    return steps
                queue.append(other)
        return None

    def balance_totals(self, only_new: bool = False) -> None:
        """Step 4: each move from a fuller broker to one holding two fewer in all, of a
        topic the first holds more of than the second (so no topic gets less even, and
        the rounds of steps 3 and 4 end)."""
        while True:
            order = sorted(self.targets, key=lambda b: (-self.total[b], b))
            if self.total[order[0]] - self.total[order[-1]] <= 1:
                return
            if not self._totals_step(order, only_new):
                return

    def _totals_step(self, order: list[int], only_new: bool) -> bool:
        for source in order:
            for destination in reversed(order):
                if self.total[source] - self.total[destination] < 2:
                    break
                best: Entry | None = None
                for topic in self.topics:
                    if self.count(topic, source) <= self.count(topic, destination):
                        continue
                    entry = self._cheapest(topic, source, destination, only_new)
                    if entry is not None and (best is None or entry < best):
                        best = entry
                if best is not None:
                    self._move(best[2], source, destination)
                    return True
        return False

    # --- leaders --------------------------------------------------------------------

    def balance_leaders(self, only_moved: bool = False) -> None:
        """Step 5: per topic, then in all (with `only_moved`, through partitions that
        move anyway)."""
        moved = {tp for tp, r in self.replicas.items() if set(r) != set(self.current[tp])}
        for _ in range(PASSES):
            before = {tp: r[0] for tp, r in self.replicas.items()}
            for topic in self.topics:
                self._leaders(self.partitions[topic], only_moved, moved, keep_topics=False)
            self._leaders(list(self.replicas), only_moved, moved, keep_topics=True)
            if all(r[0] == before[tp] for tp, r in self.replicas.items()):
                return

    def _leaders(
        self, partitions: list[TopicPartition], only_moved: bool, moved: set[TopicPartition],
        keep_topics: bool,
    ) -> None:
        """Chains of reorderings among `partitions`, each handing one leadership from a
        broker leading most towards one leading at least two fewer; with `keep_topics`,
        a step from a to b only where a leads more of the partition's topic than b (so
        no topic's leaders get less even, and the rounds of per-topic and overall steps
        end)."""
        for _ in range(2 * len(partitions) + 1):
            leads = dict.fromkeys(self.targets, 0)
            led: dict[int, list[TopicPartition]] = {b: [] for b in self.targets}
            by_topic: dict[tuple[str, int], int] = {}
            for tp in partitions:
                leader = self.replicas[tp][0]
                if leader not in leads:
                    continue
                leads[leader] += 1
                by_topic[(tp[0], leader)] = by_topic.get((tp[0], leader), 0) + 1
                if not only_moved or tp in moved:
                    led[leader].append(tp)
            high = max(leads.values())
            path = None
            for start in sorted(b for b in self.targets if leads[b] == high):
                path = self._leader_path(start, high, leads, led,
                                         by_topic if keep_topics else None)
                if path:
                    break
            if not path:
                return
            for tp, broker in path:
                replicas = self.replicas[tp]
                self._reorder(tp, [broker] + [b for b in replicas if b != broker])

    def _leader_path(
        self, start: int, high: int, leads: dict[int, int], led: dict[int, list[TopicPartition]],
        by_topic: dict[tuple[str, int], int] | None,
    ) -> list[tuple[TopicPartition, int]] | None:
        """Shortest chain start -p1-> b1 -p2-> b2 ... ending at a broker leading at most
        high - 2, preferring partitions already in the plan."""
        back: dict[int, tuple[int, TopicPartition] | None] = {start: None}
        queue = deque([start])
        while queue:
            broker = queue.popleft()
            for tp in sorted(led[broker], key=lambda t: (self.replicas[t] == self.current[t], t)):
                for other in self.replicas[tp][1:]:
                    if other in back or other not in leads:
                        continue
                    if by_topic is not None and by_topic.get((tp[0], broker), 0) <= (
                        by_topic.get((tp[0], other), 0)
                    ):
                        continue  # the topic's leaders would get less even
                    back[other] = (broker, tp)
                    if leads[other] <= high - 2:
                        path: list[tuple[TopicPartition, int]] = []
                        node = other
                        while back[node] is not None:
                            previous, via = back[node]  # type: ignore[misc]
                            path.append((via, node))
                            node = previous
                        return path
                    queue.append(other)
        return None

    def _reorder(self, tp: TopicPartition, replicas: list[int]) -> None:
        topic = tp[0]
        for position, broker in enumerate(self.replicas[tp]):
            if broker in self.target_set:
                self.held[(topic, broker)].remove(self._key(tp, position))
        self.replicas[tp] = replicas
        for position, broker in enumerate(replicas):
            if broker in self.target_set:
                bisect.insort(self.held[(topic, broker)], self._key(tp, position))

    # --- the lower bound ------------------------------------------------------------

    def minimum_moved(self) -> int:
        """Least data any plan must move to balance the replica counts, per topic and
        in all (racks aside)."""
        per_topic = sum(self._bound(self.partitions[t]) for t in self.topics)
        return max(per_topic, self._bound(list(self.current)))

    def _bound(self, partitions: list[TopicPartition]) -> int:
        total = sum(len(self.current[tp]) for tp in partitions)
        low, extra = divmod(total, len(self.targets))
        forced = 0
        outgoing: dict[int, list[int]] = {b: [] for b in self.targets}
        for tp in partitions:
            for b in self.current[tp]:
                if b in outgoing:
                    outgoing[b].append(self.sizes[tp])
                else:
                    forced += self.sizes[tp]
        for sizes in outgoing.values():
            sizes.sort()
        by_size = sorted((self.sizes[tp], tp) for tp in partitions)

        def shed(broker: int, keep: int) -> int:
            held = outgoing[broker]
            return sum(held[: max(0, len(held) - keep)])

        def take(broker: int, want: int) -> int:
            need = want - len(outgoing[broker])
            got = 0
            for size, tp in by_size:
                if need <= 0:
                    break
                if broker not in self.current[tp]:
                    got += size
                    need -= 1
            return got

        def best(cost: dict[int, tuple[int, int]]) -> int:
            """Cheapest choice of the `extra` brokers that end one above the mean."""
            base = sum(at_low for at_low, _ in cost.values())
            savings = sorted((at_low - at_high for at_low, at_high in cost.values()),
                             reverse=True)
            return base - sum(savings[:extra])

        out = best({b: (shed(b, low), shed(b, low + 1)) for b in self.targets})
        into = best({b: (take(b, low), take(b, low + 1)) for b in self.targets})
        return max(forced + out, into)
