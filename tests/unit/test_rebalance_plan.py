"""The rebalance planner (chronik.cli.rebalance_plan): what every plan keeps, and that it
moves no more than it must."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from chronik.cli.rebalance_plan import PlanError, plan, racks_in_use

TP = tuple[str, int]


@st.composite
def clusters(draw, racks: bool | None = None, max_factor: int = 3):
    """(assignment, brokers id -> rack, sizes) with replicas only on the brokers."""
    ids = draw(st.lists(st.integers(1, 30), min_size=1, max_size=7, unique=True))
    with_racks = draw(st.booleans()) if racks is None else racks
    rack_names = draw(st.lists(st.sampled_from("abcd"), min_size=len(ids), max_size=len(ids)))
    brokers = {b: (rack_names[i] if with_racks else None) for i, b in enumerate(ids)}
    count = draw(st.integers(0, 30))
    assignment: dict[TP, list[int]] = {}
    sizes: dict[TP, int] = {}
    for i in range(count):
        factor = draw(st.integers(1, min(max_factor, len(ids))))
        replicas = draw(st.permutations(ids))[:factor]
        tp = (draw(st.sampled_from(["a", "b"])), i)
        assignment[tp] = list(replicas)
        sizes[tp] = draw(st.integers(0, 10_000))
    return assignment, brokers, sizes


def counts(assignment: dict[TP, list[int]], brokers) -> Counter[int]:
    c: Counter[int] = Counter(dict.fromkeys(brokers, 0))
    for replicas in assignment.values():
        c.update(replicas)
    return c


def leader_counts(assignment: dict[TP, list[int]], brokers) -> Counter[int]:
    c: Counter[int] = Counter(dict.fromkeys(brokers, 0))
    c.update(r[0] for r in assignment.values())
    return c


def spread(replicas: list[int], brokers) -> int:
    return len({brokers[b] for b in replicas})


def check_shape(before: dict[TP, list[int]], after: dict[TP, list[int]], targets) -> None:
    assert set(after) == set(before)
    for tp, replicas in after.items():
        assert len(replicas) == len(before[tp]), tp
        assert len(set(replicas)) == len(replicas), tp
        assert set(replicas) <= set(targets), tp


def count_lower_bound(assignment: dict[TP, list[int]], targets, leaving=()) -> int:
    """Least number of replica moves that balances the counts: every surplus replica
    leaves, every missing one arrives."""
    c = counts(assignment, targets)
    total = sum(len(r) for r in assignment.values())
    low, extra = divmod(total, len(targets))
    high = low + (1 if extra else 0)
    forced = sum(c[b] for b in leaving)
    surplus = sum(max(0, c[b] - high) for b in targets) + forced
    missing = sum(max(0, low - c[b]) for b in targets)
    return max(surplus, missing)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_every_plan_keeps_factors_and_spreads_racks(cluster) -> None:
    assignment, brokers, sizes = cluster
    try:
        result = plan(assignment, brokers, sizes)
    except PlanError:
        # Only a mix of brokers with and without racks is refused.
        assert any(r is None for r in brokers.values())
        assert any(r is not None for r in brokers.values())
        return
    after = result.final()
    check_shape(assignment, after, brokers)
    racks = racks_in_use(brokers)
    if racks is not None:
        rack_count = len(set(racks.values()))
        for tp, replicas in after.items():
            assert spread(replicas, racks) == min(len(replicas), rack_count), tp
    assert result.replicas_after == dict(counts(after, brokers))
    assert result.leaders_after == dict(leader_counts(after, brokers))
    # Only partitions whose replica list changes are in the plan.
    assert all(after[tp] != assignment[tp] for tp in result.proposed)
    # A plan carried out leaves nothing more to do.
    again = plan(after, brokers, sizes)
    assert again.proposed == {} and again.moves == []


def by_topic(assignment: dict[TP, list[int]]) -> dict[str, dict[TP, list[int]]]:
    out: dict[str, dict[TP, list[int]]] = {}
    for tp, replicas in assignment.items():
        out.setdefault(tp[0], {})[tp] = replicas
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(racks=False))
def test_without_racks_counts_end_within_one_with_the_fewest_moves(cluster) -> None:
    assignment, brokers, sizes = cluster
    result = plan(assignment, brokers, sizes)
    after = result.final()
    c = counts(after, brokers)
    assert max(c.values()) - min(c.values()) <= 1
    topics = by_topic(assignment)
    for part in by_topic(after).values():
        per_topic = counts(part, brokers)
        assert max(per_topic.values()) - min(per_topic.values()) <= 1
    least = sum(count_lower_bound(part, brokers) for part in topics.values())
    assert len(result.moves) >= max(least, count_lower_bound(assignment, brokers))
    if len(topics) == 1:
        assert len(result.moves) == least
    assert result.moved >= result.minimum_moved
    # Each move copies one replica to a broker new to its partition.
    for move in result.moves:
        assert move.source in assignment[move.partition]
        assert move.destination not in assignment[move.partition]
        assert move.destination in after[move.partition]
        assert move.source not in after[move.partition]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(racks=False, max_factor=1))
def test_single_replicas_move_the_least_data(cluster) -> None:
    assignment, brokers, sizes = cluster
    assignment = {("t", p): r for (_, p), r in assignment.items()}
    sizes = {("t", p): size for (_, p), size in sizes.items()}
    result = plan(assignment, brokers, sizes)
    assert result.moved == result.minimum_moved


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(racks=False), st.data())
def test_leaders_end_within_one_when_every_partition_has_two_replicas(cluster, data) -> None:
    """Each topic's leaders end within one of each other; with one topic, that is the
    brokers' totals too (with several, a topic's balance comes first)."""
    assignment, brokers, sizes = cluster
    assume(len(brokers) >= 2)
    ids = sorted(brokers)
    # Give every partition a second replica so each one may be led by two brokers.
    for replicas in assignment.values():
        if len(replicas) == 1:
            replicas.append(data.draw(st.sampled_from([b for b in ids if b != replicas[0]])))
    result = plan(assignment, brokers, sizes)
    after = by_topic(result.final())
    for part in after.values():
        leads = leader_counts(part, brokers)
        assert max(leads.values()) - min(leads.values()) <= 1
    if len(after) == 1:
        leads = leader_counts(result.final(), brokers)
        assert max(leads.values()) - min(leads.values()) <= 1


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), st.data())
def test_decommissioned_broker_ends_empty_and_nothing_else_moves(cluster, data) -> None:
    assignment, brokers, sizes = cluster
    leaving = data.draw(st.sampled_from(sorted(brokers)))
    others = {b: r for b, r in brokers.items() if b != leaving}
    factors = [len(r) for r in assignment.values()]
    if not others or (factors and max(factors) > len(others)):
        with pytest.raises(PlanError):
            plan(assignment, brokers, sizes, empty={leaving}, balance=False)
        return
    try:
        result = plan(assignment, brokers, sizes, empty={leaving}, balance=False)
    except PlanError:
        # Only a mix of brokers with and without racks is refused.
        assert any(r is None for r in others.values())
        assert any(r is not None for r in others.values())
        return
    after = result.final()
    check_shape(assignment, after, others)
    held = [tp for tp, r in assignment.items() if leaving in r]
    assert len(result.moves) == len(held)
    assert result.moved == result.minimum_moved == sum(sizes[tp] for tp in held)
    for tp, replicas in after.items():
        if tp not in held:
            assert set(replicas) == set(assignment[tp]), tp
        else:
            assert set(replicas) - {leaving} >= set(assignment[tp]) - {leaving}
    racks = racks_in_use(others)
    if racks is not None:
        rack_count = len(set(racks.values()))
        for tp in held:
            wanted = min(len(after[tp]), rack_count)
            assert spread(after[tp], racks) >= min(wanted, spread(assignment[tp], brokers)), tp
        return
    # Without racks the replicas land on the brokers holding fewest: single replicas
    # (which may go anywhere) of one topic end within one of each other, unless they
    # were further apart already.
    if all(len(r) == 1 for r in assignment.values()) and len(by_topic(assignment)) == 1:
        before = counts({tp: [b for b in r if b != leaving] for tp, r in assignment.items()},
                        others)
        c = counts(after, others)
        assert max(c.values()) - min(c.values()) <= max(
            1, max(before.values()) - min(before.values())
        )


def test_decommission_places_the_most_constrained_replicas_first() -> None:
    # 1's replica of a-1 can only go to 2; a-0's must then go to 3.
    assignment = {("a", 0): [1], ("a", 1): [1, 3], ("a", 2): [2]}
    result = plan(assignment, dict.fromkeys([1, 2, 3]), {}, empty={1}, balance=False)
    assert result.replicas_after == {2: 2, 3: 2}


def test_decommission_revises_its_placements_through_a_chain() -> None:
    # 33 leaves: t-1 may go to 16 or 34, t-2 and t-5 to 16 or 7. Only by sending t-1 to
    # 34 do the counts end within one.
    assignment = {("t", 0): [7], ("t", 1): [7, 33], ("t", 2): [33, 34], ("t", 3): [16, 7],
                  ("t", 4): [16, 7], ("t", 5): [33, 34]}
    result = plan(assignment, dict.fromkeys([7, 16, 33, 34]), {}, empty={33}, balance=False)
    after = result.replicas_after
    assert max(after.values()) - min(after.values()) <= 1, after
    assert {tp for tp, r in result.final().items() if set(r) != set(assignment[tp])} == {
        ("t", 1), ("t", 2), ("t", 5)
    }


def test_balanced_cluster_gets_an_empty_plan() -> None:
    assignment = {("t", p): [1 + (p + i) % 3 for i in range(2)] for p in range(6)}
    result = plan(assignment, {1: None, 2: None, 3: None}, {})
    assert result.empty and result.moves == [] and result.moved == 0
    assert result.replicas_before == result.replicas_after == {1: 4, 2: 4, 3: 4}


def test_a_new_broker_takes_a_share_of_the_smallest_replicas() -> None:
    assignment = {("t", p): [1 + p % 3, 1 + (p + 1) % 3] for p in range(12)}
    sizes = {("t", p): 100 * (p + 1) for p in range(12)}
    result = plan(assignment, {1: None, 2: None, 3: None, 4: None}, sizes)
    assert result.replicas_after == {1: 6, 2: 6, 3: 6, 4: 6}
    assert result.leaders_after == {1: 3, 2: 3, 3: 3, 4: 3}
    assert len(result.moves) == 6
    # The smallest partitions move: 6 of the 12, each once.
    assert sorted(m.partition[1] for m in result.moves) == [0, 1, 2, 3, 4, 5]
    assert result.moved == result.minimum_moved == sum(100 * (p + 1) for p in range(6))


def test_racks_are_spread_before_counts() -> None:
    brokers = {1: "a", 2: "a", 3: "b", 4: "b"}
    assignment = {("t", 0): [1, 2], ("t", 1): [3, 4], ("t", 2): [1, 3], ("t", 3): [2, 4]}
    result = plan(assignment, brokers, {})
    after = result.final()
    assert all(spread(r, brokers) == 2 for r in after.values())
    assert set(result.replicas_after.values()) == {2}
    assert len(result.moves) == 2


def test_mixed_racks_are_refused_unless_racks_are_off() -> None:
    brokers = {1: "a", 2: None}
    with pytest.raises(PlanError, match="--disable-rack-aware"):
        plan({("t", 0): [1]}, brokers, {})
    assert plan({("t", 0): [1]}, brokers, {}, rack_aware=False).empty


def test_too_few_brokers_for_a_factor_is_refused() -> None:
    with pytest.raises(PlanError, match="has 3 replicas but only 2 brokers"):
        plan({("t", 0): [1, 2, 3]}, {1: None, 2: None, 3: None}, {}, empty={3}, balance=False)


def test_a_planner_run_on_a_large_cluster_is_quick() -> None:
    import time

    assignment = {(f"t{p % 10}", p): [1 + p % 3, 1 + (p + 1) % 3, 1 + (p + 2) % 3]
                  for p in range(3000)}
    sizes = {tp: (tp[1] * 7919) % 100_000 for tp in assignment}
    started = time.perf_counter()
    result = plan(assignment, {1: None, 2: None, 3: None, 4: None}, sizes)
    elapsed = time.perf_counter() - started
    assert result.replicas_after == {1: 2250, 2: 2250, 3: 2250, 4: 2250}
    leads = result.leaders_after.values()
    assert max(leads) - min(leads) <= 1
    assert elapsed < 60, elapsed
