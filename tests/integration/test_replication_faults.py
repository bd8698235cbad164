"""Kafka's replication promise under faults, on three brokers on loopback: a record
acknowledged with acks=all by a topic with replication factor 3 and
min.insync.replicas=2 survives the loss of any one broker.

Every check reads the replicas' segment files straight from each broker's data dir
(replica_check): an acknowledged record must be present exactly once, in order, at the
offset its acknowledgement gave, on every replica, and the replicas must hold the same
batches byte for byte.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer

from chronik.records.builder import Record, build_batch

from .cluster_support import Cluster, offsets_partition, wait_until
from .helpers import BASE_TS, RawClient, topic_name
from .replica_check import (
    assert_acknowledged_present,
    assert_replicas_agree,
    high_watermark,
    log_end_offset,
    replica_bytes,
    replica_records,
)
from .replication_support import (
    NOT_ENOUGH_REPLICAS,
    REPLICATION_CONFIG,
    BackgroundGroup,
    BackgroundProducer,
    committed,
    converged,
    create_replicated_topic,
    frozen,
    isr,
    leader,
    produce_request,
    wait_full_isr,
)

PARTITIONS = 6
FETCH_WAIT_MS = 200


def kill_leader_round(cluster: Cluster, topic: str, victim: int,
                      producer: BackgroundProducer, group: BackgroundGroup) -> None:
    """kill -9 `victim`; the controller moves its partitions to other ISR members and
    the producer and the group carry on there; the victim returns and rejoins every ISR."""
    led = {p for p in range(PARTITIONS) if leader(cluster, topic, p) == victim}
    epochs = {p: cluster.partition_state(topic, p)["leader_epoch"] for p in led}
    acked, read = producer.acked_count, group.count
    cluster.kill(victim)
    survivors = [i for i in cluster.ids if i != victim]
    for p in led:
        wait_until(
            lambda p=p: leader(cluster, topic, p) in survivors,
            f"{topic}-{p} led by a survivor of broker {victim}",
        )
        state = cluster.partition_state(topic, p)
        assert state["leader_epoch"] > epochs[p]
        assert victim not in state["isr"]
    # Records are acknowledged on the new leaders, and the group reads them.
    wait_until(lambda: producer.acked_since(acked, led) >= 200,
               f"acks from the new leaders of {sorted(led)}")
    wait_until(lambda: group.count > read + 200, "the group reading after the failover")
    cluster.start(victim)
    wait_full_isr(cluster, topic, PARTITIONS)


@pytest.mark.slow
def test_leader_kills_and_a_frozen_follower_lose_no_acknowledged_record(cluster_factory):
    cluster = cluster_factory(config=REPLICATION_CONFIG)
    topic = topic_name("rf3")
    create_replicated_topic(cluster, topic, PARTITIONS, **{"min.insync.replicas": "2"})
    assert all(len(r) == 3 for r in cluster.assignment(topic).values())
    group_id = topic_name("g")
    producer = BackgroundProducer(cluster.bootstrap, topic).start()
    group = BackgroundGroup(cluster.bootstrap, topic, group_id).start()
    try:
        wait_until(lambda: producer.acked_count > 500, "the producer under way")
        wait_until(lambda: group.count > 200, "the group reading")

        # Each broker that leads partitions, in turn, killed and brought back.
        killed: list[int] = []
        for _ in cluster.ids:
            leads = {
                i: sum(leader(cluster, topic, p) == i for p in range(PARTITIONS))
                for i in cluster.ids if i not in killed
            }
            victim = max(leads, key=lambda i: leads[i])
            assert leads[victim] > 0, f"no partition led by brokers {sorted(leads)}"
            kill_leader_round(cluster, topic, victim, producer, group)
            killed.append(victim)

        # A follower frozen past replica.lag.time.max.ms leaves the ISR of the
        # partitions others lead, and rejoins once it runs and catches up again.
        frozen_id = min(
            cluster.ids,
            key=lambda i: sum(leader(cluster, topic, p) == i for p in range(PARTITIONS)),
        )
        followed = [p for p in range(PARTITIONS) if leader(cluster, topic, p) != frozen_id]
        acked = producer.acked_count
        with frozen(cluster, frozen_id):
            for p in followed:
                wait_until(lambda p=p: frozen_id not in isr(cluster, topic, p),
                           f"frozen broker {frozen_id} out of {topic}-{p}'s ISR", timeout=15)
            # The ISR of two still meets min.insync.replicas=2: acks=all goes on.
            wait_until(lambda: producer.acked_since(acked, set(followed)) >= 100,
                       "acks=all with the follower frozen")
        wait_full_isr(cluster, topic, PARTITIONS)
    except BaseException:
        producer.abandon()
        group.abandon()
        raise
    acked_records = producer.stop()
    assert not producer.failed, f"delivery failures: {producer.failed[:5]}"
    assert len(acked_records) == producer.sent

    replicas = converged(cluster, topic, PARTITIONS)
    assert_acknowledged_present(acked_records, replicas)

    # The group read every acknowledged record, through every failover, and never a
    # record that is not in the replicated log (it reads only below the high watermark).
    wait_until(lambda: group.values() >= {a.value for a in acked_records},
               "the group reading every acknowledged record")
    final = {p: {r.offset: r.value for r in next(iter(replicas[p].values()))}
             for p in range(PARTITIONS)}
    for p, offset, value in group.read:
        assert final[p].get(offset) == value, f"group read {value!r} at {p}/{offset}"
    commits = group.stop_and_commit(PARTITIONS)
    ends = {p: max(final[p]) + 1 for p in range(PARTITIONS)}
    assert commits == ends

    # The committed offsets survive the loss of the group's coordinator: the broker
    # that leads the group's __consumer_offsets partition dies and is not restarted.
    offsets_p = offsets_partition(group_id)
    assert len(cluster.assignment("__consumer_offsets")[offsets_p]) == 3
    coordinator = leader(cluster, "__consumer_offsets", offsets_p)
    cluster.kill(coordinator)
    rest = ",".join(cluster.broker(i).bootstrap for i in cluster.ids if i != coordinator)
    wait_until(lambda: leader(cluster, "__consumer_offsets", offsets_p) not in (coordinator, -1),
               "a new leader for the group's offsets partition")
    got = wait_until(lambda: committed(rest, group_id, topic, PARTITIONS),
                     "the group's committed offsets from the new coordinator")
    assert got == ends


def test_two_brokers_down_acks_all_is_refused(cluster_factory):
    cluster = cluster_factory(config=REPLICATION_CONFIG)
    topic = topic_name("isr")
    create_replicated_topic(cluster, topic, 1, **{"min.insync.replicas": "2"})
    before = BackgroundProducer(cluster.bootstrap, topic).start()
    wait_until(lambda: before.acked_count >= 300, "records acknowledged by all three")
    acked = before.stop()

    survivor = leader(cluster, topic, 0)
    down = [i for i in cluster.ids if i != survivor]
    for i in down:
        cluster.kill(i)
    # The ISR shrinks to the survivor alone (the controller drops dead brokers, the
    # leader drops followers that stopped fetching).
    wait_until(lambda: isr(cluster, topic, 0) == [survivor], "the ISR down to the survivor")
    assert leader(cluster, topic, 0) == survivor

    # acks=all is refused before the append: NOT_ENOUGH_REPLICAS, and the log does not
    # move. An answer of 0 would acknowledge a record that is on one replica only.
    survivor_dir = cluster.partition_dir(survivor, topic, 0)
    end = log_end_offset(survivor_dir)
    batch = build_batch([Record(BASE_TS, b"k", b"refused")])
    with RawClient(cluster.broker(survivor).bootstrap) as raw:
        for _ in range(3):
            r = raw.request(produce_request(topic, 0, batch))
            answer = r.responses[0].partition_responses[0]
            assert int(answer.error_code) == NOT_ENOUGH_REPLICAS, answer
    assert log_end_offset(survivor_dir) == end

    # A real idempotent acks=all producer gets nothing acknowledged either.
    reports: list[object] = []
    producer = Producer({
        "bootstrap.servers": cluster.broker(survivor).bootstrap, "enable.idempotence": True,
        "acks": "all", "message.timeout.ms": 3000,
    })
    for n in range(20):
        producer.produce(topic, key=b"k", value=f"while-down-{n}".encode(),
                         on_delivery=lambda err, msg: reports.append(err))
    assert producer.flush(30) == 0
    assert len(reports) == 20 and all(err is not None for err in reports), reports

    # One broker back: the ISR grows to two and acks=all works again.
    back = down[0]
    cluster.start(back)
    wait_until(lambda: sorted(isr(cluster, topic, 0)) == sorted([survivor, back]),
               f"broker {back} back in the ISR")
    after = BackgroundProducer(cluster.bootstrap, topic).start()
    wait_until(lambda: after.acked_count >= 100, "acks=all with two brokers")
    acked += after.stop()
    hw = high_watermark(cluster.broker(survivor).bootstrap, topic, 0)
    dirs = {i: cluster.partition_dir(i, topic, 0) for i in (survivor, back)}
    wait_until(lambda: all(log_end_offset(d) >= hw for d in dirs.values()),
               "both ISR members at the high watermark")
    records = assert_replicas_agree(dirs, hw)
    assert not any(r.value.startswith(b"while-down") for r in records if r.value)
    assert_acknowledged_present(acked, {0: {i: replica_records(d, hw) for i, d in dirs.items()}})


def test_a_diverged_replica_is_truncated_and_converges(cluster_factory):
    cluster = cluster_factory(
        config={**REPLICATION_CONFIG, "replica.fetch.wait.max.ms": str(FETCH_WAIT_MS)}
    )
    topic = topic_name("div")
    create_replicated_topic(cluster, topic, 1, **{"min.insync.replicas": "2"})
    first = BackgroundProducer(cluster.bootstrap, topic).start()
    wait_until(lambda: first.acked_count >= 200, "records on all three replicas")
    acked = first.stop()
    converged(cluster, topic, 1)

    old = leader(cluster, topic, 0)
    epoch = cluster.partition_state(topic, 0)["leader_epoch"]
    followers = [i for i in cluster.ids if i != old]
    old_dir = cluster.partition_dir(old, topic, 0)
    end = log_end_offset(old_dir)
    diverged = build_batch([Record(BASE_TS, b"d", f"diverged-{n}".encode()) for n in range(10)])
    # Both followers frozen: the leader appends a batch (acks=1) no follower fetches,
    # and dies before replica.lag.time.max.ms could drop them from the ISR. The append
    # waits out replica.fetch.wait.max.ms first, so no fetch of a frozen follower is
    # still parked at the leader to carry the batch into its socket buffer.
    with frozen(cluster, followers[0]), frozen(cluster, followers[1]):
        time.sleep(FETCH_WAIT_MS / 1000 + 0.3)
        with RawClient(cluster.broker(old).bootstrap) as raw:
            r = raw.request(produce_request(topic, 0, diverged, acks=1))
            answer = r.responses[0].partition_responses[0]
            assert int(answer.error_code) == 0 and int(answer.base_offset) == end, answer
        cluster.kill(old)
    assert log_end_offset(old_dir) == end + 10

    new = wait_until(lambda: leader(cluster, topic, 0) in followers and leader(cluster, topic, 0),
                     "a follower elected leader")
    assert cluster.partition_state(topic, 0)["leader_epoch"] > epoch
    more = BackgroundProducer(cluster.bootstrap, topic).start()
    wait_until(lambda: more.acked_count >= 100, "acks=all on the new leader")
    acked_more = more.stop()
    assert min(a.offset for a in acked_more) == end  # the diverged offsets, reused

    # The old leader returns: it truncates the diverged batch (leader epochs) and
    # fetches the new leader's records in its place.
    cluster.start(old)
    wait_full_isr(cluster, topic, 1)
    replicas = converged(cluster, topic, 1)
    assert_acknowledged_present(acked + acked_more, replicas)
    assert not any(r.value.startswith(b"diverged-") for r in replicas[0][old] if r.value)
    hw = high_watermark(cluster.bootstrap, topic, 0)
    assert replica_bytes(old_dir, hw) == replica_bytes(cluster.partition_dir(new, topic, 0), hw)
    checkpoint = "leader-epoch-checkpoint"
    assert (old_dir / checkpoint).read_text() == (
        cluster.partition_dir(new, topic, 0) / checkpoint
    ).read_text()
