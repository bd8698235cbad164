"""The controller's side of controlled shutdown (chronik.cluster.controlled_shutdown), the
ControlledShutdown schemas (chronik.protocol.legacy) and request header v0."""

from __future__ import annotations

import struct
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chronik.cluster.controlled_shutdown import (
    BrokerNotAvailable,
    ShuttingDown,
    StaleBrokerEpoch,
    elect_around,
    plan,
    snapshot,
    still_led,
)
from chronik.cluster.controller import elect
from chronik.cluster.view import ClusterView, TopicView
from chronik.cluster.znodes import Assignment, BrokerInfo, PartitionState
from chronik.protocol import compat, legacy
from chronik.protocol.framing import parse_header


def brokers(*ids: int, epoch: int = 100) -> dict[int, BrokerInfo]:
    return {b: BrokerInfo(b, "h", 9000 + b, epoch=epoch + b) for b in ids}


def test_a_leader_shutting_down_hands_on_to_the_first_in_sync_replica():
    state = PartitionState(2, 7, (2, 3, 1), 4, 11)
    new = elect_around(elect, [2, 3, 1], state, {1, 2, 3}, {2}, epoch=5)
    assert new == PartitionState(3, 8, (3, 1), 5, 11)


def test_a_sole_in_sync_leader_shutting_down_keeps_leading():
    state = PartitionState(2, 7, (2,), 4, 11)
    assert elect_around(elect, [2, 3, 1], state, {1, 2, 3}, {2}, epoch=5) is None
    # ... and a dead follower still leaves its ISR, as without a shutdown.
    state = PartitionState(2, 7, (2, 3), 4, 11)
    new = elect_around(elect, [2, 3, 1], state, {1, 2}, {2}, epoch=5)
    assert new == PartitionState(2, 7, (2,), 5, 11)


def test_a_follower_shutting_down_leaves_the_isr_and_the_leader_keeps_its_epoch():
    state = PartitionState(1, 7, (1, 2, 3), 4, 11)
    new = elect_around(elect, [1, 2, 3], state, {1, 2, 3}, {2}, epoch=5)
    assert new == PartitionState(1, 7, (1, 3), 5, 11)


def test_a_broker_shutting_down_is_never_elected():
    # A failover whose only live in-sync candidate is shutting down: offline instead.
    state = PartitionState(1, 7, (1, 2), 4, 11)
    new = elect_around(elect, [1, 2, 3], state, {2, 3}, {2}, epoch=5)
    assert new is not None and new.leader == -1 and new.isr == (1, 2)
    # A new partition is not given to it either.
    new = elect_around(elect, [2, 3], None, {1, 2, 3}, {2}, epoch=5)
    assert new is not None and new.leader == 3


@given(
    replicas=st.lists(st.integers(1, 5), min_size=1, max_size=5, unique=True),
    data=st.data(),
)
def test_elections_around_brokers_shutting_down(replicas, data):
    live = data.draw(st.sets(st.integers(1, 5)))
    shutting = data.draw(st.sets(st.sampled_from(replicas)))
    isr = tuple(data.draw(st.lists(st.sampled_from(replicas), min_size=1, unique=True)))
    leader = data.draw(st.sampled_from([-1, *replicas]))
    state = PartitionState(leader, 3, isr, 1, 9)
    new = elect_around(elect, replicas, state, live, shutting, epoch=2)
    after = new or state
    eligible = {r for r in replicas if r in live and r not in shutting and r in isr}
    if leader in live and leader in shutting:
        if eligible:
            # Handed on, to an eligible in-sync replica, and it left the ISR.
            assert after.leader in eligible and after.leader_epoch == 4
            assert not set(after.isr) & set(shutting)
        else:
            assert after.leader == leader  # remains: nobody to take it
    elif after.leader != leader:
        # Any other change of leader elects a live, eligible replica or nobody.
        assert after.leader == -1 or (after.leader in live and after.leader not in shutting)
    assert after.isr, "an ISR is never emptied"
    if new is not None and after.leader in live and after.leader not in shutting:
        assert not set(after.isr) & set(shutting) - {after.leader}


def test_admission_checks_the_broker_and_its_epoch_and_forgets_it_when_it_registers_again():
    shutting = ShuttingDown()
    with pytest.raises(BrokerNotAvailable):
        shutting.admit(brokers(1, 3), 2, -1)
    registered = brokers(1, 2, 3)  # broker 2's epoch is 102
    with pytest.raises(StaleBrokerEpoch) as stale:
        shutting.admit(registered, 2, 101)
    assert stale.value.code == 77
    shutting.admit(registered, 2, 102)
    shutting.admit(registered, 3, -1)  # v0/v1: no epoch to check
    assert set(shutting) == {2, 3}
    shutting.prune(registered)
    assert set(shutting) == {2, 3}
    # Broker 2 registered again (a newer czxid), broker 3 went.
    shutting.prune({1: registered[1], 2: BrokerInfo(2, "h", 9002, epoch=500)})
    assert set(shutting) == set()


def test_an_epoch_newer_than_the_view_is_kept_until_the_view_reads_it():
    shutting = ShuttingDown()
    shutting.admit(brokers(1, 2), 2, 400)  # the view still has the older registration
    shutting.prune(brokers(1, 2))
    assert 2 in shutting
    shutting.prune({2: BrokerInfo(2, "h", 9002, epoch=400)})
    assert 2 in shutting


def _view() -> ClusterView:
    view = ClusterView()
    view.brokers = brokers(1, 2, 3)
    t = TopicView("t", Assignment(uuid.uuid4(), {0: [2, 1, 3], 1: [1, 2, 3], 2: [2], 3: [2, 3]}))
    t.states = {
        0: PartitionState(2, 5, (2, 1, 3), 1, 4),
        1: PartitionState(1, 5, (1, 2, 3), 1, 4),
        2: PartitionState(2, 5, (2,), 1, 4),
        3: PartitionState(2, 5, (2,), 1, 4),  # nobody else in sync
    }
    gone = TopicView("gone", Assignment(uuid.uuid4(), {0: [2, 1]}))
    gone.states = {0: PartitionState(2, 1, (2, 1), 1, 0)}
    view.topics = {"t": t, "gone": gone}
    view.deleting = {"gone"}
    return view


def test_the_plan_of_a_controlled_shutdown():
    view = _view()

    def current(topic: TopicView, partition: int) -> PartitionState | None:
        return topic.states.get(partition)

    shutting = ShuttingDown()
    shutting.admit(view.brokers, 2, -1)
    writes = plan(view, current, shutting, 2, elect, 9, lambda t: False)
    by_partition = {p: s for topic, p, s, created in writes if not created}
    assert [t.name for t, *_ in writes] == ["t", "t"]
    assert by_partition == {
        0: PartitionState(1, 6, (1, 3), 9, 4),  # leadership handed on
        1: PartitionState(1, 5, (1, 3), 9, 4),  # the ISR left
    }
    # A single replica is neither acted on nor reported; a deleted topic is left alone.
    assert still_led(view, current, 2) == [("t", 0), ("t", 3)]
    for topic, p, s, _ in writes:
        topic.states[p] = s
    assert still_led(view, current, 2) == [("t", 3)]
    assert set(snapshot(view, current, 2)) == {"t-0", "t-1", "t-3"}


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_controlled_shutdown_schemas_round_trip(version):
    request_cls = legacy.REQUESTS[7, version]
    fields = {"broker_id": 2} | ({"broker_epoch": 4294967400} if version >= 2 else {})
    request = compat.build(request_cls, **fields)
    wire = compat.encode(request)
    assert compat.decode(request_cls, wire, 0)[0] == request
    assert request_cls.__flexible__ == (version >= 3)
    namespace = legacy.RESPONSES[7, version]
    response = compat.build(
        namespace.ControlledShutdownResponse,
        error_code=77,
        remaining_partitions=(
            compat.build(namespace.RemainingPartition, topic_name="t", partition_index=3),
        ),
    )
    decoded = compat.decode(namespace.ControlledShutdownResponse, compat.encode(response), 0)[0]
    assert int(decoded.error_code) == 77
    assert [(p.topic_name, p.partition_index) for p in decoded.remaining_partitions] == [("t", 3)]


def test_controlled_shutdown_v0_has_no_client_id_in_its_header():
    body = struct.pack(">i", 2)
    header = parse_header(struct.pack(">hhi", 7, 0, 42) + body, False)
    assert (header.client_id, header.body_offset) == (None, 8)
    frame = struct.pack(">hhih", 7, 1, 42, 3) + b"abc" + body
    header = parse_header(frame, False)
    assert (header.client_id, header.body_offset) == ("abc", 13)
