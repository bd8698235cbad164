"""OffsetCommit while a classic group is between JoinGroup and SyncGroup (CompletingRebalance).

Kafka (ClassicGroup.validateOffsetCommit) checks the member and its generation before the
group state: a commit from the previous generation is ILLEGAL_GENERATION, which clients
such as librdkafka expect after a rejoin (its test 0113, v_commit_during_rebalance); only
a member of the new generation hears REBALANCE_IN_PROGRESS until the assignment is synced.
"""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor

from .helpers import RawClient, code, create_topic, nested, req, topic_name

NONE = 0
ILLEGAL_GENERATION = 22
UNKNOWN_MEMBER_ID = 25
REBALANCE_IN_PROGRESS = 27
MEMBER_ID_REQUIRED = 79
JOIN_V, SYNC_V, HEARTBEAT_V, COMMIT_V = 5, 5, 4, 8


class Member:
    def __init__(self, bootstrap: str, group: str) -> None:
        self.client = RawClient(bootstrap)
        self.group = group
        self.member_id = ""

    def join(self) -> object:
        protocol = nested(11, JOIN_V, "JoinGroupRequestProtocol", name="range", metadata=b"m")
        while True:
            r = self.client.request(req(
                11, JOIN_V, group_id=self.group, session_timeout=30000, rebalance_timeout=30000,
                member_id=self.member_id, group_instance_id=None, protocol_type="consumer",
                protocols=(protocol,), reason=None,
            ))
            self.member_id = r.member_id
            if code(r.error_code) != MEMBER_ID_REQUIRED:
                assert code(r.error_code) == NONE
                return r

    def sync(self, generation: int, assignments: tuple = ()) -> int:
        r = self.client.request(req(
            14, SYNC_V, group_id=self.group, generation_id=generation, member_id=self.member_id,
            group_instance_id=None, protocol_type="consumer", protocol_name="range",
            assignments=assignments,
        ))
        return code(r.error_code)

    def heartbeat(self, generation: int) -> int:
        r = self.client.request(req(12, HEARTBEAT_V, group_id=self.group, generation_id=generation,
                                    member_id=self.member_id, group_instance_id=None))
        return code(r.error_code)

    def commit(self, topic: str, generation: int, member_id: str | None = None) -> int:
        partition = nested(8, COMMIT_V, "OffsetCommitRequestPartition", partition_index=0,
                           committed_offset=7, committed_leader_epoch=-1, committed_metadata=None)
        topics = (nested(8, COMMIT_V, "OffsetCommitRequestTopic", name=topic,
                         partitions=(partition,)),)
        r = self.client.request(req(
            8, COMMIT_V, group_id=self.group, generation_id_or_member_epoch=generation,
            member_id=self.member_id if member_id is None else member_id,
            group_instance_id=None, topics=topics,
        ))
        (result,) = [p for t in r.topics for p in t.partitions]
        return code(result.error_code)

    def close(self) -> None:
        self.client.close()


def test_commit_from_the_previous_generation_during_completing_rebalance(broker):
    topic = topic_name("commit-rebalance")
    create_topic(broker.bootstrap, topic, partitions=1)
    group = f"g-{uuid.uuid4().hex[:8]}"
    a, b = Member(broker.bootstrap, group), Member(broker.bootstrap, group)
    try:
        first = a.join()
        assert first.generation_id == 1
        assert a.sync(1, (nested(14, SYNC_V, "SyncGroupRequestAssignment",
                                 member_id=a.member_id, assignment=b"p0"),)) == NONE
        assert a.commit(topic, 1) == NONE

        with ThreadPoolExecutor(1) as pool:
            b_joined = pool.submit(b.join)  # blocks until a rejoins
            while a.heartbeat(1) != REBALANCE_IN_PROGRESS:
                pass
            # PreparingRebalance: a's generation is still the group's, its commit is taken.
            assert a.commit(topic, 1) == NONE
            a_joined = a.join()
            assert b_joined.result(timeout=30).generation_id == a_joined.generation_id == 2

        # CompletingRebalance: no SyncGroup yet.
        assert a.commit(topic, 1) == ILLEGAL_GENERATION
        assert a.commit(topic, 2) == REBALANCE_IN_PROGRESS
        assert b.commit(topic, 2) == REBALANCE_IN_PROGRESS
        assert a.commit(topic, 2, member_id="somebody-else") == UNKNOWN_MEMBER_ID

        leader = a if a_joined.leader == a.member_id else b
        assert leader.sync(2, (
            nested(14, SYNC_V, "SyncGroupRequestAssignment", member_id=a.member_id,
                   assignment=b"p0"),
            nested(14, SYNC_V, "SyncGroupRequestAssignment", member_id=b.member_id,
                   assignment=b""),
        )) == NONE
        assert a.commit(topic, 2) == NONE
        assert a.commit(topic, 1) == ILLEGAL_GENERATION
    finally:
        a.close()
        b.close()
