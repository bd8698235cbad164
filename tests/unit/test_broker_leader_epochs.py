"""The pure parts of OffsetForLeaderEpoch and ElectLeaders: fencing, the answer of a log
with and without recorded epochs, and which partitions need an election."""

from __future__ import annotations

from types import SimpleNamespace

from hypothesis import given
from hypothesis import strategies as st

from chronik.broker.apis import elect_leaders as el
from chronik.broker.apis import offset_for_leader_epoch as ofle
from chronik.protocol import errors


@given(st.integers(-1, 50), st.integers(0, 50))
def test_fence_is_kafkas_current_epoch_check(current: int, partition_epoch: int) -> None:
    code = ofle.fence(current, partition_epoch)
    if current == -1 or current == partition_epoch:
        assert code == errors.NONE
    elif current < partition_epoch:
        assert code == errors.FENCED_LEADER_EPOCH
    else:
        assert code == errors.UNKNOWN_LEADER_EPOCH


class Cache:
    """Stands in for storage's LeaderEpochCache: records what it was asked."""

    def __init__(self, entries: list[tuple[int, int]]) -> None:
        self.entries = entries
        self.asked: list[tuple[int, int]] = []

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        self.asked.append((epoch, log_end_offset))
        return (epoch, 42)


def test_a_log_with_epochs_answers_from_its_cache() -> None:
    cache = Cache([(0, 0), (3, 10)])
    plog = SimpleNamespace(epochs=cache, end_offset=99)
    assert ofle.end_offset_for(plog, 2, 3) == (2, 42)
    assert cache.asked == [(2, 99)]


@given(st.integers(-1, 20), st.integers(0, 20))
def test_a_log_without_epochs_knows_only_the_current_one(requested: int, current: int) -> None:
    for plog in (SimpleNamespace(end_offset=7), SimpleNamespace(epochs=Cache([]), end_offset=7)):
        expected = (current, 7) if requested == current else (-1, -1)
        assert ofle.end_offset_for(plog, requested, current) == expected


def test_election_needed_per_type() -> None:
    live = {1, 2, 3}
    assert not el.election_needed(el.PREFERRED, [1, 2, 3], 1, live)
    assert el.election_needed(el.PREFERRED, [1, 2, 3], 2, live)
    assert el.election_needed(el.PREFERRED, [1, 2, 3], -1, live)
    assert not el.election_needed(el.UNCLEAN, [1, 2, 3], 2, live)
    assert el.election_needed(el.UNCLEAN, [1, 2, 3], -1, live)
    assert el.election_needed(el.UNCLEAN, [1, 2, 3], 4, live)


def test_judge_names_kafkas_errors() -> None:
    replicas = {("a", 0): [1, 2], ("a", 1): [2, 1], ("a", 2): [3, 1], ("gone", 0): [1]}
    leaders = {("a", 0): 1, ("a", 1): 1, ("a", 2): -1, ("gone", 0): 1}
    wanted = [*replicas, ("b", 0)]
    out = el.judge(
        el.PREFERRED,
        wanted,
        lambda t, p: replicas.get((t, p)),
        lambda t, p: leaders[(t, p)],
        live={1, 2},
        deleting={"gone"},
    )
    assert {tp: code for tp, (code, _) in out.items()} == {
        ("a", 0): errors.ELECTION_NOT_NEEDED,
        ("a", 1): errors.PREFERRED_LEADER_NOT_AVAILABLE,
        ("a", 2): errors.PREFERRED_LEADER_NOT_AVAILABLE,
        ("gone", 0): errors.INVALID_TOPIC_EXCEPTION,
        ("b", 0): errors.UNKNOWN_TOPIC_OR_PARTITION,
    }
    unclean = el.judge(
        el.UNCLEAN, wanted[:3], lambda t, p: replicas[(t, p)], lambda t, p: leaders[(t, p)], {1, 2}
    )
    assert [code for code, _ in unclean.values()] == [
        errors.ELECTION_NOT_NEEDED,
        errors.ELECTION_NOT_NEEDED,
        errors.ELIGIBLE_LEADERS_NOT_AVAILABLE,
    ]


def test_requested_partitions_once_each_in_order() -> None:
    request = SimpleNamespace(
        topic_partitions=(
            SimpleNamespace(topic="a", partitions=(1, 0, 1)),
            SimpleNamespace(topic="b", partitions=(2,)),
            SimpleNamespace(topic="a", partitions=(0,)),
        )
    )
    assert el.requested(request) == [("a", 1), ("a", 0), ("b", 2)]
    assert el.requested(SimpleNamespace(topic_partitions=None)) is None
