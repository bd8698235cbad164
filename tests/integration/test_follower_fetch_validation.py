"""A follower's Fetch counts for the ISR and the high watermark only at an offset the
leader can vouch for, as Kafka updates a follower's state from a read that succeeded."""

from __future__ import annotations

import datetime
import threading
import time

from confluent_kafka.admin import NewTopic

from chronik.cluster.replica_client import request_module
from chronik.protocol import errors
from chronik.protocol.compat import build
from chronik.records.builder import Record, build_batch

from .rawclient import RawClient
from .replication_support import frozen, produce_request, wait_full_isr

TOPIC = "events"


def _follower_fetch(replica_id: int, offset: int, leader_epoch: int) -> object:
    module = request_module(1, 11)
    return build(
        module.FetchRequest,
        replica_id=replica_id,
        max_wait=datetime.timedelta(milliseconds=0),
        min_bytes=0,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(build(module.FetchTopic, topic=TOPIC, partitions=(build(
            module.FetchPartition, partition=0, current_leader_epoch=leader_epoch,
            fetch_offset=offset, log_start_offset=-1, partition_max_bytes=1 << 20,
        ),)),),
        forgotten_topics_data=(),
        rack_id="",
    )


def test_a_fetch_past_the_leaders_end_does_not_count_the_follower_as_caught_up(
    cluster_factory,
):
    """A replica claiming an offset past the leader's end holds a tail the leader never
    wrote. Counting it as caught up (its offset was clamped to the leader's end) moved the
    high watermark over records that only the leader had: here an acks=all produce was
    acknowledged while the other in-sync replica was frozen and held none of it."""
    cluster = cluster_factory(3, {"replica.lag.time.max.ms": "30000"})
    admin = cluster.admin(1)
    futures = admin.create_topics(
        [NewTopic(TOPIC, 1, replica_assignment=[[1, 2]],
                  config={"min.insync.replicas": "2"})],
        operation_timeout=30,
    )
    futures[TOPIC].result(60)
    wait_full_isr(cluster, TOPIC, 1)
    epoch = int(cluster.partition_state(TOPIC, 0)["leader_epoch"])
    leader = cluster.broker(1).bootstrap
    outcome: list[int] = []
    with frozen(cluster, 2):

        def produce() -> None:
            batch = build_batch([Record(int(time.time() * 1000), b"k", b"only-on-the-leader")])
            with RawClient(leader, timeout=30) as raw:
                response = raw.request(produce_request(TOPIC, 0, batch, timeout_ms=6000))
            outcome.append(int(response.responses[0].partition_responses[0].error_code))

        producing = threading.Thread(target=produce)
        producing.start()
        time.sleep(1.0)
        with RawClient(leader) as raw:
            answer = raw.request(_follower_fetch(2, 10_000, epoch))
        code = int(answer.responses[0].partitions[0].error_code)
        producing.join(30)
    assert code == errors.OFFSET_OUT_OF_RANGE
    assert outcome == [errors.REQUEST_TIMED_OUT], (
        f"acks=all produce answered {outcome} while the only other ISR member was frozen"
    )
