"""Replica assignment, leader election and znode values of cluster mode."""

from __future__ import annotations

import json
import uuid
from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from chronik.cluster import znodes
from chronik.cluster.controller import elect
from chronik.cluster.kafka_assignment import rack_unaware as assign_replicas
from chronik.cluster.session import split_connect
from chronik.cluster.znodes import Assignment, BrokerInfo, PartitionState


@given(
    st.integers(1, 60),
    st.lists(st.integers(0, 50), min_size=1, max_size=8, unique=True),
    st.data(),
)
def test_assignment_spreads_leaders_and_never_repeats_a_broker(partitions, brokers, data):
    factor = data.draw(st.integers(1, len(brokers)))
    out = assign_replicas(partitions, factor, brokers)
    assert sorted(out) == list(range(partitions))
    for replicas in out.values():
        assert len(replicas) == factor
        assert len(set(replicas)) == factor
        assert set(replicas) <= set(brokers)
    leaders = Counter(r[0] for r in out.values())
    # Round-robin: no broker leads more than one partition more than another.
    counts = [leaders.get(b, 0) for b in brokers]
    assert max(counts) - min(counts) <= 1


def test_assignment_matches_kafkas_for_a_fixed_start():
    # AdminUtils.assignReplicasToBrokers(brokers 0..4, 10 partitions, rf 3, start 0):
    # the example of Kafka's own documentation comment.
    out = assign_replicas(10, 3, [0, 1, 2, 3, 4], start_index=0)
    assert out[0] == [0, 1, 2]
    assert out[1] == [1, 2, 3]
    assert out[4] == [4, 0, 1]
    assert out[5] == [0, 2, 3]
    assert out[9] == [4, 1, 2]


def test_added_partitions_continue_the_round_robin():
    first = assign_replicas(3, 1, [1, 2, 3], start_index=1)
    more = assign_replicas(3, 1, [1, 2, 3], start_index=1, start_partition=3)
    assert [first[p][0] for p in range(3)] == [2, 3, 1]
    assert [more[p][0] for p in range(3, 6)] == [2, 3, 1]


def test_new_partition_leader_is_its_first_live_replica():
    state = elect([2, 3], None, {1, 3}, epoch=4)
    assert state == PartitionState(3, 0, (3,), 4)
    offline = elect([2], None, {1}, epoch=4)
    assert offline is not None and offline.leader == -1 and offline.isr == (2,)


def test_a_dead_leader_goes_offline_keeping_its_isr_and_returns():
    live = PartitionState(2, 0, (2,), 1, zk_version=0)
    assert elect([2], live, {1, 2, 3}, epoch=1) is None
    gone = elect([2], live, {1, 3}, epoch=2)
    assert gone == PartitionState(-1, 1, (2,), 2, 0)
    assert elect([2], PartitionState(-1, 1, (2,), 2, 1), {1, 3}, epoch=2) is None
    back = elect([2], PartitionState(-1, 1, (2,), 2, 1), {1, 2, 3}, epoch=2)
    assert back == PartitionState(2, 2, (2,), 2, 1)


def test_clean_election_takes_only_isr_members():
    state = PartitionState(1, 5, (1, 3), 1, zk_version=7)
    new = elect([1, 2, 3], state, {2, 3}, epoch=2)
    assert new == PartitionState(3, 6, (3,), 2, 7)
    # Replica 2 is alive but out of the ISR: the partition stays offline instead.
    new = elect([1, 2], PartitionState(1, 5, (1,), 1, 7), {2}, epoch=2)
    assert new is not None and new.leader == -1 and new.isr == (1,)


def test_znode_values_are_kafkas():
    topic_id = uuid.uuid4()
    value = json.loads(znodes.assignment_value(Assignment(topic_id, {1: [3], 0: [2]})))
    assert value["partitions"] == {"0": [2], "1": [3]}
    assert value["version"] == 3
    assert znodes.parse_assignment(znodes.assignment_value(Assignment(topic_id, {0: [2]}))) \
        == Assignment(topic_id, {0: [2]})
    assert len(value["topic_id"]) == 22 and "=" not in value["topic_id"]
    state = json.loads(znodes.state_value(PartitionState(2, 3, (2,), 4)))
    assert state == {"controller_epoch": 4, "leader": 2, "version": 1, "leader_epoch": 3,
                     "isr": [2]}
    broker = json.loads(znodes.broker_value(BrokerInfo(2, "h", 9093, "r1")))
    assert broker["endpoints"] == ["PLAINTEXT://h:9093"]
    assert (broker["host"], broker["port"], broker["rack"]) == ("h", 9093, "r1")
    parsed = znodes.parse_broker(2, znodes.broker_value(BrokerInfo(2, "h", 9093)))
    assert (parsed.node_id, parsed.host, parsed.port, parsed.rack) == (2, "h", 9093, None)
    # Every listener is registered, as Kafka registers them; clients of each listener
    # are told its endpoint, other brokers the inter-broker one.
    endpoints = (("PLAINTEXT", "PLAINTEXT", "h", 9092), ("EXTERNAL", "SASL_SSL", "e.example", 9094))
    broker = json.loads(znodes.broker_value(BrokerInfo(2, "h", 9092, None, endpoints)))
    assert broker["endpoints"] == ["PLAINTEXT://h:9092", "EXTERNAL://e.example:9094"]
    assert broker["listener_security_protocol_map"] == {
        "PLAINTEXT": "PLAINTEXT", "EXTERNAL": "SASL_SSL"}
    parsed = znodes.parse_broker(2, znodes.broker_value(BrokerInfo(2, "h", 9092, None, endpoints)))
    assert parsed.endpoints == endpoints
    assert parsed.endpoint("EXTERNAL") == ("e.example", 9094)
    assert parsed.endpoint("PLAINTEXT") == parsed.endpoint("UNKNOWN") == ("h", 9092)
    # chronik's own fields (the registry's URL, the HTTP listener's) only when served;
    # Kafka's readers ignore them, and ours ignore fields they do not know.
    assert "http_api" not in broker and "schema_registry" not in broker
    served = BrokerInfo(2, "h", 9092, schema_registry="http://h:8081", http_api="https://h:8443")
    value = json.loads(znodes.broker_value(served))
    assert (value["schema_registry"], value["http_api"]) == ("http://h:8081", "https://h:8443")
    parsed = znodes.parse_broker(2, znodes.broker_value(served), epoch=12)
    assert (parsed.schema_registry, parsed.http_api, parsed.epoch) == (
        "http://h:8081", "https://h:8443", 12)
    value.update(http_api=7, kraft_field={"x": 1})
    parsed = znodes.parse_broker(2, json.dumps(value).encode())
    assert parsed.http_api is None and parsed.schema_registry == "http://h:8081"
    assert znodes.parse_controller(znodes.controller_value(7)) == 7
    assert znodes.parse_controller(b"junk") == -1


def test_zookeeper_connect_with_and_without_chroot():
    assert split_connect("a:1,b:2/kafka/prod") == ("a:1,b:2", "/kafka/prod")
    assert split_connect("a:1") == ("a:1", "")
    assert split_connect("a:1/") == ("a:1", "")


def test_a_dead_follower_leaves_the_isr_and_the_leader_stays():
    state = PartitionState(1, 4, (1, 2, 3), 1, 7)
    new = elect([1, 2, 3], state, {1, 3}, 2)
    assert (new.leader, new.leader_epoch, new.isr, new.zk_version) == (1, 4, (1, 3), 7)
    assert elect([1, 2, 3], new, {1, 3}, 2) is None


def test_unclean_election_only_when_allowed():
    state = PartitionState(-1, 5, (1,), 1, 3)
    assert elect([1, 2, 3], state, {2, 3}, 1) is None  # stays offline
    new = elect([1, 2, 3], state, {2, 3}, 1, unclean=True)
    assert (new.leader, new.leader_epoch, new.isr) == (2, 6, (2,))


def test_preferred_election_needs_the_first_replica_alive_and_in_sync():
    from chronik.cluster.controller import elect_preferred
    from chronik.protocol import errors

    led_by_2 = PartitionState(2, 3, (2, 1), 1, 4)
    code, new = elect_preferred([1, 2], led_by_2, {1, 2}, 1)
    assert code == errors.NONE and (new.leader, new.leader_epoch) == (1, 4)
    assert elect_preferred([1, 2], led_by_2, {2}, 1)[0] == errors.PREFERRED_LEADER_NOT_AVAILABLE
    out_of_sync = PartitionState(2, 3, (2,), 1, 4)
    assert elect_preferred([1, 2], out_of_sync, {1, 2}, 1)[0] == (
        errors.PREFERRED_LEADER_NOT_AVAILABLE
    )
    assert elect_preferred([2, 1], led_by_2, {1, 2}, 1)[0] == errors.ELECTION_NOT_NEEDED


def test_leader_rebalance_picks_the_partitions_of_imbalanced_brokers():
    from chronik.cluster.controller import Controller
    from chronik.cluster.view import ClusterView, TopicView

    view = ClusterView()
    view.brokers = {b: BrokerInfo(b, "h", 1) for b in (1, 2, 3)}
    replicas = {p: [1 + p % 3, 1 + (p + 1) % 3] for p in range(30)}
    topic = TopicView("t", Assignment(uuid.uuid4(), replicas))
    for p, r in replicas.items():
        # Broker 2 lost the leadership of two of its ten preferred partitions.
        leader = r[1] if p in (1, 4) else r[0]
        topic.states[p] = PartitionState(leader, 1, tuple(r), 1)
    view.topics["t"] = topic
    controller = Controller(1, None, view, imbalance_percentage=10)  # type: ignore[arg-type]
    assert sorted(controller.imbalanced()) == [("t", 1), ("t", 4)]
    controller.imbalance_percentage = 20  # 2 of 10 is not over 20%
    assert controller.imbalanced() == []


def test_a_leader_that_wrote_itself_out_of_the_isr_hands_the_partition_on():
    # Its log went offline: it wrote the ISR without itself.
    state = PartitionState(1, 4, (2, 3), 1, 8)
    new = elect([1, 2, 3], state, {1, 2, 3}, 2)
    assert (new.leader, new.leader_epoch, new.isr, new.zk_version) == (2, 5, (2, 3), 8)
    # Nobody else alive in the ISR: it stays rather than the partition going offline.
    assert elect([1, 2, 3], PartitionState(1, 4, (2,), 1, 8), {1, 3}, 2) is None
