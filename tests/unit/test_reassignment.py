"""The rules of partition reassignment (chronik.cluster.reassignment) and the topic
znode's adding/removing replicas."""

from __future__ import annotations

import json
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chronik.cluster import znodes
from chronik.cluster.controller import elect
from chronik.cluster.reassignment import Refused, apply, completion, reassign
from chronik.cluster.znodes import Assignment, PartitionState
from chronik.protocol import errors

BROKERS = {1, 2, 3, 4, 5}
replica_lists = st.lists(st.sampled_from(sorted(BROKERS)), min_size=1, max_size=4, unique=True)


def test_the_topic_znode_keeps_adding_and_removing_replicas() -> None:
    a = Assignment(uuid.uuid4(), {0: [3, 4, 1], 1: [2]}, {0: [3, 4]}, {0: [1]})
    value = json.loads(znodes.assignment_value(a))
    assert value["adding_replicas"] == {"0": [3, 4]}
    assert value["removing_replicas"] == {"0": [1]}
    assert znodes.parse_assignment(znodes.assignment_value(a)) == a
    assert a.target(0) == [3, 4] and a.original(0) == [1]
    assert a.reassigning(0) and not a.reassigning(1)


def test_kafkas_reassign_partitions_znode_round_trips() -> None:
    targets = {("t", 0): [1, 2], ("u", 3): [3]}
    assert znodes.parse_reassignments(znodes.reassignments_value(targets)) == targets
    assert znodes.parse_reassignments(None) == {}


@given(original=replica_lists, first=replica_lists, second=replica_lists)
def test_a_new_target_starts_from_the_original_replicas(original, first, second) -> None:
    a = Assignment(uuid.uuid4(), {0: list(original)})
    apply(a, 0, reassign(a, 0, first, BROKERS))
    assert a.target(0) == first
    assert set(a.original(0)) == set(original)
    apply(a, 0, reassign(a, 0, second, BROKERS))
    assert a.target(0) == second
    assert set(a.original(0)) == set(original)
    assert set(a.replicas[0]) == set(second) | set(original)
    assert set(a.adding.get(0, ())) == set(second) - set(original)
    assert set(a.removing.get(0, ())) == set(original) - set(second)


@given(original=replica_lists, target=replica_lists)
def test_a_cancel_goes_back_to_the_original_replicas(original, target) -> None:
    a = Assignment(uuid.uuid4(), {0: list(original)})
    change = reassign(a, 0, target, BROKERS)
    apply(a, 0, change)
    if not a.reassigning(0):
        with pytest.raises(Refused) as refused:
            reassign(a, 0, None, BROKERS)
        assert refused.value.code == errors.NO_REASSIGNMENT_IN_PROGRESS
        return
    apply(a, 0, reassign(a, 0, None, BROKERS))
    assert set(a.replicas[0]) == set(original)
    assert not a.reassigning(0)


@pytest.mark.parametrize("target", [[], [1, 1], [1, 9]])
def test_bad_targets_are_refused(target) -> None:
    a = Assignment(uuid.uuid4(), {0: [1, 2]})
    with pytest.raises(Refused) as refused:
        reassign(a, 0, target, BROKERS)
    assert refused.value.code == errors.INVALID_REPLICA_ASSIGNMENT
    with pytest.raises(Refused) as refused:
        reassign(a, 5, [1], BROKERS)
    assert refused.value.code == errors.UNKNOWN_TOPIC_OR_PARTITION


def test_completion_waits_for_every_target_replica_in_sync() -> None:
    a = Assignment(uuid.uuid4(), {0: [3, 4, 1, 2]}, {0: [3, 4]}, {0: [1, 2]})
    state = PartitionState(1, 5, (1, 2, 3), 7, zk_version=9)
    assert completion(a, 0, state, BROKERS, 8) is None
    done = completion(a, 0, PartitionState(1, 5, (1, 2, 3, 4), 7, 9), BROKERS, 8)
    # The leader was leaving: a target replica in sync leads, under a new epoch, and the
    # leaving replicas leave the ISR.
    assert done == PartitionState(3, 6, (3, 4), 8, 9)
    # A target replica that is not alive does not complete it.
    assert completion(a, 0, PartitionState(1, 5, (1, 2, 3, 4), 7, 9), {1, 2, 3}, 8) is None
    # A leader that stays keeps leading; a shutting-down one does not.
    kept = Assignment(uuid.uuid4(), {0: [1, 3, 2]}, {0: [3]}, {0: [2]})
    state = PartitionState(1, 5, (1, 2, 3), 7, 9)
    assert completion(kept, 0, state, BROKERS, 8) == PartitionState(1, 6, (1, 3), 8, 9)
    assert completion(kept, 0, state, BROKERS, 8, {1}).leader == 3


def test_an_election_drops_replicas_no_longer_assigned_from_the_isr() -> None:
    # A cancelled reassignment's new replica had joined the ISR and even led.
    state = PartitionState(4, 3, (1, 2, 4), 1, 5)
    new = elect([2, 1], state, BROKERS, 2)
    assert new is not None and new.leader == 2 and new.isr == (1, 2)
    assert new.leader_epoch == 4
    stays = elect([1, 2], PartitionState(1, 3, (1, 2, 4), 1, 5), BROKERS, 2)
    assert stays == PartitionState(1, 3, (1, 2), 2, 5)
