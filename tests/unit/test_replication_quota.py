"""Replication throttles (chronik.cluster.replication_quota): Kafka's SimpleRate over the
quota window, the throttled-replicas lists, the rates as the cluster view gives them, and
which replicas are held back."""

from __future__ import annotations

import uuid
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chronik.cluster.replication_quota import (
    ALL,
    UNLIMITED,
    ReplicationQuota,
    ReplicationQuotas,
    SimpleRate,
    parse_rate,
    parse_throttled,
)
from chronik.cluster.view import ClusterView, TopicView
from chronik.cluster.znodes import Assignment

# -- the rate ---------------------------------------------------------------------------


def test_exceeds_the_quota_then_returns_below_it_as_time_passes() -> None:
    """Kafka's ReplicationQuotaManagerTest.shouldExceedQuotaThenReturnBackBelowBound..."""
    quota = ReplicationQuota("LeaderReplication", num=10, window_ms=1000)
    quota.bound = 100
    t = 0
    assert not quota.exceeded(t)  # the window opens at the first look
    t += 1500
    quota.record(1, t)
    assert not quota.exceeded(t)
    quota.record(149, t)  # 150 B over 1.5 s
    assert not quota.exceeded(t)
    quota.record(1, t)  # 151 B over 1.5 s
    assert quota.byte_rate(t) == pytest.approx(151 / 1.5)
    assert quota.exceeded(t)
    t += 500
    assert quota.byte_rate(t) == pytest.approx(151 / 2)
    assert not quota.exceeded(t)
    t += 500
    quota.record(99, t)  # 250 B over 2.5 s
    assert quota.byte_rate(t) == pytest.approx(100)
    assert not quota.exceeded(t)
    quota.record(1, t)
    assert quota.exceeded(t)
    t += 2000
    assert quota.byte_rate(t) == pytest.approx(251 / 4.5)
    assert not quota.exceeded(t)


def test_the_first_window_is_one_sample_long() -> None:
    rate = SimpleRate(11, 1000)
    rate.record(2000, 0)
    assert rate.measure(0) == pytest.approx(2000)
    assert rate.measure(500) == pytest.approx(2000)
    assert rate.measure(2000) == pytest.approx(1000)


def test_samples_without_events_for_the_whole_window_are_forgotten() -> None:
    rate = SimpleRate(11, 1000)
    rate.record(5000, 0)
    assert rate.measure(10_999) > 0
    assert rate.measure(11_000) == 0
    rate.record(100, 11_000)
    assert rate.measure(11_000) == pytest.approx(100)


def test_an_unlimited_quota_is_never_exceeded() -> None:
    quota = ReplicationQuota("FollowerReplication")
    quota.record(10**12, 0)
    assert not quota.exceeded(0)
    assert quota.delay(0) == 0.0
    assert quota.bytes_total == 10**12


def test_the_delay_is_the_time_the_rate_needs_to_fall_to_the_bound() -> None:
    quota = ReplicationQuota("FollowerReplication")
    quota.bound = 1000
    quota.record(3000, 0)
    assert quota.exceeded(0)
    assert quota.delay(0) == pytest.approx(3.0)
    assert quota.exceeded(2900)
    assert quota.delay(2900) == pytest.approx(0.1)
    assert not quota.exceeded(3000)
    assert quota.delay(3000) == 0.0


def test_a_zero_rate_lets_one_fetch_through_per_window() -> None:
    quota = ReplicationQuota("LeaderReplication")
    quota.bound = 0
    assert not quota.exceeded(0)
    quota.record(1, 0)
    assert quota.exceeded(0)
    assert quota.delay(0) == pytest.approx(11.0)
    assert not quota.exceeded(11_000)


@settings(max_examples=40, deadline=None)
@given(
    bound=st.integers(1_000, 50_000_000),
    chunk_share=st.floats(0.01, 1.0),
    headroom=st.floats(0.5, 10.0),
)
def test_a_greedy_sender_gets_the_bound_and_no_more(
    bound: int, chunk_share: float, headroom: float
) -> None:
    """A sender polling every ``dt`` and sending a chunk whenever the quota is not
    exceeded (a follower's fetches) averages the bound over a minute, or what its polling
    allows when that is less; never more than the bound and one chunk."""
    chunk = max(int(chunk_share * bound), 1)
    dt = max(int(1000 * chunk / (headroom * bound)), 1)
    capacity = chunk * 1000 / dt
    quota = ReplicationQuota("FollowerReplication")
    quota.bound = bound
    seconds = 60
    sent = 0
    for t in range(0, seconds * 1000, dt):
        if not quota.exceeded(t):
            quota.record(chunk, t)
            sent += chunk
    rate = sent / seconds
    assert rate <= bound * 1.03 + chunk / seconds
    assert rate >= min(bound, capacity) * 0.9


@settings(max_examples=60, deadline=None)
@given(
    events=st.lists(st.tuples(st.integers(0, 3000), st.integers(0, 10**6)), max_size=60)
)
def test_the_rate_counts_every_byte_of_the_last_ten_seconds(
    events: list[tuple[int, int]]
) -> None:
    """Whatever the times and sizes, what the rate is taken over holds every byte recorded
    in the last num - 1 windows, and nothing from before num + 1 windows."""
    rate = SimpleRate(11, 1000)
    t = 0
    history: list[tuple[int, int]] = []
    for gap, size in events:
        t += gap
        rate.record(size, t)
        history.append((t, size))
        total = rate.total(t)
        recent = sum(s for when, s in history if t - when < 10_000)
        assert total >= recent
        assert total <= sum(s for when, s in history if t - when < 12_000)
        assert rate.window_size(t) >= 1000


# -- the settings ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "broker", "expected"),
    [
        ("*", 7, ALL),
        ("", 1, frozenset()),
        ("0:1,1:2,0:2,3:2", 2, frozenset({0, 1, 3})),
        ("0:1,1:2", 3, frozenset()),
        (" 0:1 , 4:1 ", 1, frozenset({0, 4})),
        ("0:1,x:1,2,:1,5:1", 1, frozenset({0, 5})),
    ],
)
def test_throttled_replicas_name_this_broker(value: str, broker: int, expected: frozenset) -> None:
    parsed = parse_throttled(value, broker)
    assert parsed == expected
    if expected is ALL:
        assert parsed is ALL


def test_a_wildcard_throttles_every_partition_of_its_topic_only() -> None:
    quota = ReplicationQuota("LeaderReplication")
    quota.throttled = {"a": ALL, "b": frozenset({1, 2})}
    assert quota.is_throttled("a", 0) and quota.is_throttled("a", 999)
    assert quota.is_throttled("b", 2) and not quota.is_throttled("b", 3)
    assert not quota.is_throttled("c", 0)


def test_a_rate_is_the_brokers_own_then_the_cluster_default() -> None:
    name = "leader.replication.throttled.rate"
    assert parse_rate({name: "10"}, {name: "20"}, name) == 10
    assert parse_rate({}, {name: "20"}, name) == 20
    assert parse_rate({}, {}, name) == UNLIMITED
    assert parse_rate({name: "lots"}, {}, name) == UNLIMITED


def _view(broker_configs: dict, topics: dict[str, dict[str, str]]) -> ClusterView:
    view = ClusterView()
    view.broker_configs = broker_configs
    for name, configs in topics.items():
        assignment = Assignment(uuid.uuid4(), {0: [1, 2, 3], 1: [1, 2, 3]})
        view.topics[name] = TopicView(name, assignment, configs=configs)
    return view


def test_settings_follow_the_view() -> None:
    quotas = ReplicationQuotas(2)
    view = _view(
        {"2": {"leader.replication.throttled.rate": "1000"},
         "<default>": {"follower.replication.throttled.rate": "500",
                       "leader.replication.throttled.rate": "9"}},
        {"moving": {"leader.replication.throttled.replicas": "0:1,0:2",
                    "follower.replication.throttled.replicas": "1:2"},
         "all": {"follower.replication.throttled.replicas": "*"},
         "plain": {"retention.ms": "1"}},
    )
    quotas.follow(view)
    assert quotas.leader.bound == 1000 and quotas.follower.bound == 500
    assert dict(quotas.leader.throttled) == {"moving": frozenset({0})}
    assert dict(quotas.follower.throttled) == {"moving": frozenset({1}), "all": ALL}
    # Removed: nothing throttled, unlimited again.
    view.broker_configs = {}
    view.topics["moving"].configs = {}
    view.topics["all"].configs = {}
    quotas.follow(view)
    assert quotas.leader.bound == UNLIMITED and quotas.follower.bound == UNLIMITED
    assert not quotas.leader.throttled and not quotas.follower.throttled


# -- who is held back --------------------------------------------------------------------


def _replica(topic: str, partition: int, isr: tuple[int, ...], end: int = 0,
             leader_hw: int = -1) -> SimpleNamespace:
    return SimpleNamespace(
        topic=topic, partition=partition, key=(topic, partition), isr=isr, pending_isr=None,
        leader_hw=leader_hw, log=SimpleNamespace(end_offset=end),
    )


def _over(quota: ReplicationQuota, throttled: dict[str, frozenset[int]]) -> None:
    quota.bound = 100
    quota.throttled = throttled
    quota.record(10_000)


def test_the_leader_holds_back_only_out_of_sync_followers_of_throttled_partitions() -> None:
    quotas = ReplicationQuotas(1)
    partition = _replica("t", 0, isr=(1, 2))
    assert not quotas.leader_holds_back(partition, "t", 0, 3)  # nothing throttled yet
    _over(quotas.leader, {"t": frozenset({0})})
    assert quotas.leader_holds_back(partition, "t", 0, 3)
    assert not quotas.leader_holds_back(partition, "t", 0, 2)  # in sync
    assert not quotas.leader_holds_back(_replica("t", 1, (1,)), "t", 1, 3)  # not listed
    partition.pending_isr = (1, 2, 3)  # joining: holds what is acknowledged
    assert not quotas.leader_holds_back(partition, "t", 0, 3)
    quotas.leader.bound = UNLIMITED
    partition.pending_isr = None
    assert not quotas.leader_holds_back(partition, "t", 0, 3)
    assert quotas.leader.held_total == 1


def test_the_leader_counts_the_bytes_of_throttled_partitions_only() -> None:
    quotas = ReplicationQuotas(1)
    quotas.leader.throttled = {"t": frozenset({0})}
    part = SimpleNamespace
    topics = [
        SimpleNamespace(name="t", partitions=[part(partition=0, records=b"x" * 100),
                                              part(partition=1, records=b"y" * 50)]),
        SimpleNamespace(name="u", partitions=[part(partition=0, records=b"z" * 70)]),
        SimpleNamespace(name="t", partitions=[part(partition=0, records=None)]),
    ]
    quotas.leader_sent(topics)
    assert quotas.leader.bytes_total == 100


def test_the_follower_leaves_out_only_out_of_sync_throttled_partitions() -> None:
    quotas = ReplicationQuotas(3)
    behind = _replica("t", 0, isr=(1, 2), end=10, leader_hw=500)
    in_isr = _replica("t", 1, isr=(1, 2, 3), end=10, leader_hw=500)
    caught_up = _replica("t", 2, isr=(1, 2), end=500, leader_hw=500)
    other = _replica("u", 0, isr=(1,), end=0, leader_hw=500)
    fetch = [behind, in_isr, caught_up, other]
    assert quotas.follower_held(fetch) == set()
    _over(quotas.follower, {"t": ALL})
    assert quotas.follower_held(fetch) == {("t", 0)}
    quotas.follower_received("t", 0, b"a" * 30)
    quotas.follower_received("u", 0, b"a" * 40)
    quotas.follower_received("t", 1, None)
    assert quotas.follower.bytes_total == 10_000 + 30


def test_metrics_show_each_sides_throttled_bytes_and_rate() -> None:
    from chronik.broker.metrics import Metrics

    quotas = ReplicationQuotas(1)
    quotas.leader.record(3000)
    quotas.follower.held_total = 2
    replicas = SimpleNamespace(
        under_replicated=lambda: 0, isr_shrinks=0, isr_expands=0, max_lag=lambda: 0,
        quotas=quotas,
    )
    lines: list[str] = []
    kinds: dict[str, str] = {}
    Metrics(SimpleNamespace(cluster=SimpleNamespace(replicas=replicas)))._render_replication(
        lines, lambda name, kind, text: kinds.__setitem__(name, kind)
    )
    values = dict(line.split(" ") for line in lines)
    leader, follower = '{type="LeaderReplication"}', '{type="FollowerReplication"}'
    assert values["chronik_replication_throttled_bytes_total" + leader] == "3000"
    assert values["chronik_replication_throttled_bytes_total" + follower] == "0"
    assert float(values["chronik_replication_throttled_byte_rate" + leader]) == 3000.0
    assert values["chronik_replication_throttled_held_total" + follower] == "2"
    assert kinds["chronik_replication_throttled_byte_rate"] == "gauge"
    assert kinds["chronik_replication_throttled_bytes_total"] == "counter"
