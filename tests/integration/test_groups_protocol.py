"""Every version of the group APIs, spoken on the wire with kio, one request at a time."""

from __future__ import annotations

import uuid

import pytest

from .helpers import RawClient, code, create_topic, nested, req

NONE = 0
UNKNOWN_MEMBER_ID = 25
GROUP_ID_NOT_FOUND = 69
MEMBER_ID_REQUIRED = 79
NON_EMPTY_GROUP = 68


@pytest.fixture
def client(broker):
    with RawClient(broker.bootstrap) as c:
        yield c


@pytest.mark.parametrize("version", range(10))
def test_join_sync_heartbeat_leave_at_every_join_version(broker, client, version):
    group = f"g-{uuid.uuid4().hex[:8]}"
    sync_v, hb_v, leave_v = min(version, 5), min(version, 4), min(version, 5)
    protocol = nested(11, version, "JoinGroupRequestProtocol", name="range", metadata=b"meta")

    def join(member_id: str) -> object:
        return client.request(req(
            11, version, group_id=group, session_timeout=10000, rebalance_timeout=10000,
            member_id=member_id, group_instance_id=None, protocol_type="consumer",
            protocols=(protocol,), reason=None,
        ))

    joined = join("")
    if version >= 4:
        assert code(joined.error_code) == MEMBER_ID_REQUIRED
        joined = join(joined.member_id)
    assert code(joined.error_code) == NONE
    assert joined.generation_id == 1
    assert joined.leader == joined.member_id
    assert [(m.member_id, m.metadata) for m in joined.members] == [(joined.member_id, b"meta")]

    assignment = nested(14, sync_v, "SyncGroupRequestAssignment",
                        member_id=joined.member_id, assignment=b"mine")
    synced = client.request(req(
        14, sync_v, group_id=group, generation_id=1, member_id=joined.member_id,
        group_instance_id=None, protocol_type="consumer", protocol_name="range",
        assignments=(assignment,),
    ))
    assert (code(synced.error_code), synced.assignment) == (NONE, b"mine")

    beat = client.request(req(12, hb_v, group_id=group, generation_id=1,
                              member_id=joined.member_id, group_instance_id=None))
    assert code(beat.error_code) == NONE
    beat = client.request(req(12, hb_v, group_id=group, generation_id=7,
                              member_id=joined.member_id, group_instance_id=None))
    assert code(beat.error_code) == 22  # ILLEGAL_GENERATION

    if leave_v >= 3:
        identity = nested(13, leave_v, "MemberIdentity", member_id=joined.member_id,
                          group_instance_id=None, reason=None)
        ghost = nested(13, leave_v, "MemberIdentity", member_id="ghost",
                       group_instance_id=None, reason=None)
        left = client.request(req(13, leave_v, group_id=group, members=(identity, ghost)))
        assert code(left.error_code) == NONE
        assert [code(m.error_code) for m in left.members] == [NONE, UNKNOWN_MEMBER_ID]
    else:
        left = client.request(req(13, leave_v, group_id=group, member_id=joined.member_id))
        assert code(left.error_code) == NONE
    listed = client.request(req(16, 4, states_filter=("Empty",)))
    assert group in {g.group_id for g in listed.groups}


@pytest.mark.parametrize("version", range(7))
def test_find_coordinator_answers_this_broker(broker, client, version):
    if version >= 4:
        r = client.request(req(10, version, key_type=0, coordinator_keys=("a", "b")))
        assert [(c.key, c.node_id, c.port) for c in r.coordinators] == [
            ("a", 1, broker.port), ("b", 1, broker.port),
        ]
    else:
        r = client.request(req(10, version, key="a", key_type=0))
        assert (code(r.error_code), r.host, r.port) == (NONE, "127.0.0.1", broker.port)


@pytest.mark.parametrize("version", range(2, 10))
def test_offset_commit_then_fetch_at_every_version(broker, client, version):
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, 2)
    partition = nested(8, version, "OffsetCommitRequestPartition", partition_index=1,
                       committed_offset=41, committed_leader_epoch=3, committed_metadata="md")
    topics = (nested(8, version, "OffsetCommitRequestTopic", name=topic, partitions=(partition,)),)
    missing = (
        nested(8, version, "OffsetCommitRequestTopic", name="nope", partitions=(partition,)),
    )
    r = client.request(req(
        8, version, group_id=group, generation_id_or_member_epoch=-1, member_id="",
        group_instance_id=None, retention_time=-1, topics=topics + missing,
    ))
    assert [code(p.error_code) for t in r.topics for p in t.partitions] == [NONE, 3]

    fetch_v = version  # OffsetFetch has the same range, shifted by one at the bottom
    if fetch_v >= 8:
        wanted = nested(9, fetch_v, "OffsetFetchRequestTopics", name=topic,
                        partition_indexes=(0, 1))
        groups = (
            nested(9, fetch_v, "OffsetFetchRequestGroup", group_id=group, member_id=None,
                   member_epoch=-1, topics=(wanted,)),
            nested(9, fetch_v, "OffsetFetchRequestGroup", group_id="other", member_id=None,
                   member_epoch=-1, topics=None),
        )
        f = client.request(req(9, fetch_v, groups=groups, require_stable=False))
        assert [g.group_id for g in f.groups] == [group, "other"]
        parts = [p for t in f.groups[0].topics for p in t.partitions]
        assert f.groups[1].topics == ()
    else:
        wanted = nested(9, fetch_v, "OffsetFetchRequestTopic", name=topic,
                        partition_indexes=(0, 1))
        f = client.request(req(9, fetch_v, group_id=group, topics=(wanted,),
                               require_stable=False))
        parts = [p for t in f.topics for p in t.partitions]
    got = [(p.partition_index, p.committed_offset, p.metadata) for p in parts]
    assert got == [(0, -1, ""), (1, 41, "md")]
    if version >= 6:  # the leader epoch is committed from v6 and fetched from v5
        assert [p.committed_leader_epoch for p in parts] == [-1, 3]


@pytest.mark.parametrize("version", range(7))
def test_describe_unknown_group(broker, client, version):
    r = client.request(req(15, version, groups=("nobody",), include_authorized_operations=False))
    (g,) = r.groups
    if version >= 6:
        assert code(g.error_code) == GROUP_ID_NOT_FOUND
    else:
        assert (code(g.error_code), g.group_state) == (NONE, "Dead")


@pytest.mark.parametrize("version", range(3))
def test_delete_groups_and_offset_delete(broker, client, version):
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, 1)
    partition = nested(8, 8, "OffsetCommitRequestPartition", partition_index=0,
                       committed_offset=5, committed_leader_epoch=-1, committed_metadata=None)
    topics = (nested(8, 8, "OffsetCommitRequestTopic", name=topic, partitions=(partition,)),)
    client.request(req(8, 8, group_id=group, generation_id_or_member_epoch=-1, member_id="",
                       group_instance_id=None, topics=topics))

    od_part = nested(47, 0, "OffsetDeleteRequestPartition", partition_index=0)
    od = client.request(req(47, 0, group_id=group, topics=(
        nested(47, 0, "OffsetDeleteRequestTopic", name=topic, partitions=(od_part,)),)))
    assert code(od.error_code) == NONE
    assert [code(p.error_code) for t in od.topics for p in t.partitions] == [NONE]
    od = client.request(req(47, 0, group_id="nobody", topics=()))
    assert code(od.error_code) == GROUP_ID_NOT_FOUND

    r = client.request(req(42, version, groups_names=(group, "nobody")))
    assert [(x.group_id, code(x.error_code)) for x in r.results] == [
        (group, NONE), ("nobody", GROUP_ID_NOT_FOUND),
    ]
    listed = client.request(req(16, 0))
    assert group not in {g.group_id for g in listed.groups}
