"""The hand-encoded Metadata response (chronik.protocol.metadata_response) and the
handler's cache of encoded topic entries (chronik.broker.metadata_cache).

The reference is kio: the response the handler built before it encoded by hand, one kio
entity per broker, topic and partition (kept below as ``reference_response``), encoded
by kio's writer. For every version 0-12 the handler's bytes must equal it, on a random
cluster view, and again after each of a series of random changes to that view (leader,
ISR, epoch, replicas, partitions added, brokers gone, topics deleted and created again),
so that an entry kept across a change that alters it fails here.
"""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chronik.broker.apis import metadata
from chronik.broker.context import RequestContext
from chronik.broker.metadata_cache import VARIANTS_PER_TOPIC, TopicEntryCache
from chronik.broker.topics import is_internal
from chronik.cluster.view import ClusterView, TopicView
from chronik.cluster.znodes import Assignment, BrokerInfo, PartitionState
from chronik.protocol import compat, errors
from chronik.protocol.compat import ZERO_UUID
from chronik.protocol.metadata_response import encode_metadata_response, encode_topic

VERSIONS = range(0, 13)
OMITTED = metadata.OPERATIONS_OMITTED
CODES = [0, 3, 5, 17, 29, 42, 87, 100]
NODE_IDS = st.integers(0, 6)


def response_class(version: int, name: str) -> type:
    return getattr(compat.response_module(3, version), name)


def build(version: int, schema: str, /, **fields: Any) -> Any:
    return compat.build(response_class(version, schema), **fields)


# -- the encoder against kio, field by field ---------------------------------------------

node_list = st.lists(st.integers(-1, 2**31 - 1), max_size=4).map(tuple)
partition = st.tuples(
    st.sampled_from(CODES),
    st.integers(0, 2**31 - 1),
    st.integers(-1, 2**31 - 1),
    st.integers(-1, 2**31 - 1),
    node_list,
    node_list,
    node_list,
)
topic = st.tuples(
    st.sampled_from(CODES),
    st.one_of(st.none(), st.text(alphabet="abcxyz._-0123456789é", max_size=150)),
    st.one_of(st.just(ZERO_UUID), st.builds(uuid.uuid4)),
    st.booleans(),
    st.lists(partition, max_size=5),
    st.integers(-(2**31), 2**31 - 1),
)
broker = st.tuples(
    st.integers(0, 2**31 - 1),
    st.text(max_size=40),
    st.integers(0, 65535),
    st.one_of(st.none(), st.text(max_size=10)),
)


@settings(max_examples=300, deadline=None)
@given(
    version=st.sampled_from(VERSIONS),
    brokers=st.lists(broker, max_size=4),
    cluster_id=st.one_of(st.none(), st.text(max_size=30)),
    controller=st.integers(-1, 2**31 - 1),
    topics=st.lists(topic, max_size=5),
    cluster_ops=st.integers(-(2**31), 2**31 - 1),
)
def test_encoder_matches_kio(
    version: int,
    brokers: list[Any],
    cluster_id: str | None,
    controller: int,
    topics: list[Any],
    cluster_ops: int,
) -> None:
    if version < 12:
        # Only v12 carries a null topic name; the handler answers "" before it.
        topics = [(t[0], t[1] or "", *t[2:]) for t in topics]
    entity = build(
        version,
        "MetadataResponse",
        throttle_time=0,
        brokers=tuple(
            build(version, "MetadataResponseBroker", node_id=n, host=h, port=p, rack=r)
            for n, h, p, r in brokers
        ),
        cluster_id=cluster_id,
        controller_id=controller,
        topics=tuple(
            build(
                version,
                "MetadataResponseTopic",
                error_code=code,
                name=name,
                topic_id=topic_id,
                is_internal=internal,
                partitions=tuple(
                    build(
                        version,
                        "MetadataResponsePartition",
                        error_code=p[0],
                        partition_index=p[1],
                        leader_id=p[2],
                        leader_epoch=p[3],
                        replica_nodes=p[4],
                        isr_nodes=p[5],
                        offline_replicas=p[6],
                    )
                    for p in parts
                ),
                topic_authorized_operations=ops,
            )
            for code, name, topic_id, internal, parts, ops in topics
        ),
        cluster_authorized_operations=cluster_ops,
    )
    encoded = [encode_topic(version, *t) for t in topics]
    ours = b"".join(
        encode_metadata_response(version, brokers, cluster_id, controller, encoded, cluster_ops)
    )
    assert ours == compat.encode(entity)


def test_null_name_refused_before_v12() -> None:
    with pytest.raises(ValueError):
        encode_topic(11, errors.UNKNOWN_TOPIC_ID, None, ZERO_UUID, False, (), OMITTED)


def test_many_partitions_and_long_arrays() -> None:
    """Lengths past one uvarint byte (128+ partitions, replicas) encode as kio's."""
    parts = [(0, i, 1, 3, tuple(range(130)), (1, 2), ()) for i in range(200)]
    for version in VERSIONS:
        entity = build(
            version,
            "MetadataResponseTopic",
            error_code=0,
            name="t" * 200,
            topic_id=ZERO_UUID,
            is_internal=False,
            partitions=tuple(
                build(
                    version,
                    "MetadataResponsePartition",
                    error_code=p[0],
                    partition_index=p[1],
                    leader_id=p[2],
                    leader_epoch=p[3],
                    replica_nodes=p[4],
                    isr_nodes=p[5],
                    offline_replicas=p[6],
                )
                for p in parts
            ),
            topic_authorized_operations=OMITTED,
        )
        ours = encode_topic(version, 0, "t" * 200, ZERO_UUID, False, parts, OMITTED)
        assert ours == _encode_nested(entity)


def _encode_nested(entity: Any) -> bytes:
    """kio's bytes of one topic entry: a response of just it, less the head and tail."""
    version = entity.__version__
    whole = build(version, "MetadataResponse", throttle_time=0, brokers=(), cluster_id=None,
                  controller_id=-1, topics=(entity,), cluster_authorized_operations=OMITTED)
    head, tail = encode_metadata_response(version, (), None, -1, [b""], OMITTED)[::2]
    data = compat.encode(whole)
    assert data.startswith(head) and data.endswith(tail)
    return data[len(head) : len(data) - len(tail)]


# -- the handler against the entities it built before -------------------------------------


def reference_response(ctx: RequestContext, names: list[str] | None, with_ops: bool) -> bytes:
    """What the handler answered when it built kio entities (its code as it was, for a
    principal allowed everything, without auto-creation)."""
    broker = ctx.services
    version = ctx.api_version
    view = broker.cluster.view if broker.cluster is not None else None

    def ops(name: str) -> int:
        return broker.authorizer.operations("", "", None, name) if with_ops else OMITTED

    def partitions(topic: Any) -> tuple[Any, ...]:
        if view is None:
            node = broker.node_id
            return tuple(
                build(version, "MetadataResponsePartition", error_code=0, partition_index=i,
                      leader_id=node, leader_epoch=0, replica_nodes=(node,), isr_nodes=(node,),
                      offline_replicas=())
                for i in range(len(topic.partitions))
            )
        live = view.brokers
        out = []
        for index in range(topic.partition_count):
            replicas = topic.assignment.replicas.get(index, [])
            state = topic.states.get(index)
            leader = view.leader_of(topic.name, index)
            out.append(
                build(
                    version,
                    "MetadataResponsePartition",
                    error_code=errors.NONE if leader >= 0 else errors.LEADER_NOT_AVAILABLE,
                    partition_index=index,
                    leader_id=leader,
                    leader_epoch=state.leader_epoch if state is not None else -1,
                    replica_nodes=tuple(replicas),
                    isr_nodes=tuple(state.isr) if state is not None else (),
                    offline_replicas=tuple(r for r in replicas if r not in live),
                )
            )
        return tuple(out)

    def entry(topic: Any) -> Any:
        topic_id = topic.topic_id if view is None else topic.assignment.topic_id
        return build(version, "MetadataResponseTopic", error_code=0, name=topic.name,
                     topic_id=topic_id, is_internal=is_internal(topic.name),
                     partitions=partitions(topic), topic_authorized_operations=ops(topic.name))

    topics = view.topics if view is not None else broker.catalog.topics
    if names is None:
        entries = [entry(t) for t in sorted(topics.values(), key=lambda t: t.name)]
    else:
        entries = [
            entry(topics[n]) if n in topics else build(
                version, "MetadataResponseTopic", error_code=errors.UNKNOWN_TOPIC_OR_PARTITION,
                name=n, topic_id=ZERO_UUID, is_internal=False, partitions=(),
                topic_authorized_operations=ops(n))
            for n in names
        ]
    if view is not None:
        members = sorted(view.brokers.values(), key=lambda b: b.node_id)
        brokers = [(b.node_id, b.host, b.port, b.rack) for b in members]
        controller = view.controller_id
    else:
        brokers = [(broker.node_id, "localhost", 9092, None)]
        controller = broker.node_id
    cluster_ops = 0x1234 if with_ops and 8 <= version <= 10 else OMITTED
    return compat.encode(
        build(
            version,
            "MetadataResponse",
            throttle_time=0,
            brokers=tuple(
                build(version, "MetadataResponseBroker", node_id=n, host=h, port=p, rack=r)
                for n, h, p, r in brokers
            ),
            cluster_id=broker.cluster_id,
            controller_id=controller,
            topics=tuple(entries),
            cluster_authorized_operations=cluster_ops,
        )
    )


class Authorizer:
    """Everything allowed; each topic its own operations bit set."""

    def authorize(self, *args: Any) -> bool:
        return True

    def operations(self, principal: str, host: str, resource_type: Any, name: str) -> int:
        return 0x1234 if name == "kafka-cluster" else (len(name) * 37) & 0xFFFF


def services(view: ClusterView | None, catalog_topics: dict[str, Any] | None = None) -> Any:
    cluster = None
    catalog = catalog_topics if catalog_topics is not None else {}
    if view is not None:
        cluster = SimpleNamespace(
            view=view,
            controller_id=lambda: view.controller_id,
            live_brokers=lambda: sorted(view.brokers.values(), key=lambda b: b.node_id),
        )
    return SimpleNamespace(
        catalog=SimpleNamespace(topics=catalog, get=catalog.get),
        cluster=cluster,
        config=SimpleNamespace(auto_create_topics=False),
        node_id=1,
        cluster_id="cluster-x",
        metadata_entries=TopicEntryCache(),
        authorizer=Authorizer(),
        security=SimpleNamespace(endpoint=lambda listener: ("localhost", 9092)),
    )


def request(version: int, names: list[str] | None, with_ops: bool) -> Any:
    if names is None:
        topics: Any = () if version == 0 else None
    else:
        topics = tuple(SimpleNamespace(name=n, topic_id=ZERO_UUID) for n in names)
    return SimpleNamespace(
        topics=topics,
        allow_auto_topic_creation=False,
        include_cluster_authorized_operations=with_ops,
        include_topic_authorized_operations=with_ops,
    )


def answer(broker: Any, version: int, names: list[str] | None, with_ops: bool) -> bytes:
    ctx = RequestContext(broker, 3, version, 1, None, "127.0.0.1")
    parts = asyncio.run(metadata.handle(ctx, request(version, names, with_ops)))
    return b"".join(parts)


def check_all_versions(broker: Any, names: list[str] | None) -> None:
    for version in VERSIONS:
        for with_ops in (False, True) if version >= 8 else (False,):
            ctx = RequestContext(broker, 3, version, 1, None, "127.0.0.1")
            # v0 has no null list: no topics named is every topic.
            wanted = None if version == 0 and not names else names
            expected = reference_response(ctx, wanted, with_ops)
            assert answer(broker, version, names, with_ops) == expected, (version, with_ops)


TOPIC_NAMES = st.sampled_from(["a", "b", "orders", "__consumer_offsets", "x.y-z"])


@st.composite
def states(draw: Any, replicas: list[int]) -> PartitionState | None:
    if draw(st.integers(0, 5)) == 0:
        return None
    leader = draw(st.one_of(st.sampled_from(replicas or [-1]), NODE_IDS, st.just(-1)))
    isr = draw(st.lists(NODE_IDS, unique=True, max_size=4))
    return PartitionState(leader, draw(st.integers(0, 50)), tuple(isr), 1)


@st.composite
def topic_views(draw: Any, name: str) -> TopicView:
    count = draw(st.integers(0, 6))
    replicas = {p: draw(st.lists(NODE_IDS, unique=True, max_size=4)) for p in range(count)}
    topic = TopicView(name, Assignment(uuid.uuid4(), replicas))
    for p in range(count):
        state = draw(states(replicas[p]))
        if state is not None:
            topic.set_state(p, state)
    return topic


def broker_infos(ids: list[int]) -> dict[int, BrokerInfo]:
    return {
        i: BrokerInfo(i, f"host-{i}", 9000 + i, rack=None if i % 2 else f"rack-{i % 3}")
        for i in ids
    }


@st.composite
def cluster_views(draw: Any) -> ClusterView:
    view = ClusterView()
    view.brokers = broker_infos(draw(st.lists(NODE_IDS, unique=True, max_size=5)))
    view.controller_id = draw(st.sampled_from([-1, *view.brokers]))
    for name in draw(st.lists(TOPIC_NAMES, unique=True, max_size=4)):
        view.topics[name] = draw(topic_views(name))
    return view


@st.composite
def change(draw: Any, view: ClusterView) -> None:
    """One change to the view, made the way the ZooKeeper watcher makes it."""
    kind = draw(st.sampled_from(["state", "state", "replicas", "add", "brokers", "recreate",
                                 "delete", "create"]))
    names = sorted(view.topics)
    if kind == "brokers":
        view.brokers = broker_infos(draw(st.lists(NODE_IDS, unique=True, max_size=5)))
        return
    if kind == "create" or not names:
        name = draw(TOPIC_NAMES)
        view.topics[name] = draw(topic_views(name))
        return
    topic = view.topics[draw(st.sampled_from(names))]
    count = topic.partition_count
    if kind == "delete":
        del view.topics[topic.name]
    elif kind == "recreate":
        view.topics[topic.name] = draw(topic_views(topic.name))
    elif kind == "state" and count:
        p = draw(st.integers(0, count - 1))
        topic.set_state(p, draw(states(topic.assignment.replicas[p])))
    elif kind == "replicas" and count:
        p = draw(st.integers(0, count - 1))
        replicas = dict(topic.assignment.replicas)
        replicas[p] = draw(st.lists(NODE_IDS, unique=True, min_size=1, max_size=4))
        topic.set_assignment(Assignment(topic.assignment.topic_id, replicas), 2)
    else:
        replicas = dict(topic.assignment.replicas)
        for p in range(count, count + draw(st.integers(1, 3))):
            replicas[p] = draw(st.lists(NODE_IDS, unique=True, max_size=4))
        topic.set_assignment(Assignment(topic.assignment.topic_id, replicas), 3)


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_cluster_answers_as_kio_through_changes(data: Any) -> None:
    view = data.draw(cluster_views())
    broker = services(view)
    for _ in range(data.draw(st.integers(1, 5))):
        check_all_versions(broker, None)
        named = data.draw(st.lists(TOPIC_NAMES, max_size=3))
        check_all_versions(broker, named)
        data.draw(change(view))
    check_all_versions(broker, None)
    # Deleted topics' entries are gone after a request for every topic.
    assert set(broker.metadata_entries._topics) <= set(view.topics)


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_single_node_answers_as_kio_through_changes(data: Any) -> None:
    topics: dict[str, Any] = {}
    broker = services(None, topics)
    for _ in range(data.draw(st.integers(1, 6))):
        kind = data.draw(st.sampled_from(["create", "grow", "delete"]))
        name = data.draw(st.sampled_from(sorted(topics)) if topics and kind != "create"
                         else TOPIC_NAMES)
        if kind == "delete":
            topics.pop(name, None)
        elif kind == "grow" and name in topics:
            # CreatePartitions appends to the topic's list in place.
            topics[name].partitions.extend([None] * data.draw(st.integers(1, 3)))
        else:
            topics[name] = SimpleNamespace(
                name=name, topic_id=uuid.uuid4(), partitions=[None] * data.draw(st.integers(0, 5))
            )
        check_all_versions(broker, None)
        check_all_versions(broker, data.draw(st.lists(TOPIC_NAMES, max_size=3)))


# -- the cache itself --------------------------------------------------------------------


def test_cache_keeps_an_entry_until_its_stamp_changes() -> None:
    cache = TopicEntryCache()
    cache.put("t", (12, OMITTED), (1, 1), b"old")
    assert cache.get("t", (12, OMITTED), (1, 1)) == b"old"
    assert cache.get("t", (12, OMITTED), (2, 1)) is None
    assert cache.get("t", (11, OMITTED), (1, 1)) is None
    cache.put("t", (12, OMITTED), (2, 1), b"new")
    assert cache.get("t", (12, OMITTED), (2, 1)) == b"new"
    assert cache.entries() == 1


def test_cache_is_bounded_per_topic_and_forgets_deleted_topics() -> None:
    cache = TopicEntryCache()
    for ops in range(3 * VARIANTS_PER_TOPIC):
        cache.put("t", (12, ops), (1,), b"x")
    assert cache.entries() == VARIANTS_PER_TOPIC
    assert cache.get("t", (12, 3 * VARIANTS_PER_TOPIC - 1), (1,)) == b"x"
    assert cache.get("t", (12, 0), (1,)) is None
    cache.put("gone", (12, OMITTED), (1,), b"y")
    cache.keep_only({"t": object()})
    assert len(cache) == 1 and cache.get("gone", (12, OMITTED), (1,)) is None


def test_view_stamps_change_with_every_change() -> None:
    view = ClusterView()
    topic = TopicView("t", Assignment(uuid.uuid4(), {0: [1]}))
    seen = {topic.stamp, view.brokers_stamp}
    topic.set_state(0, PartitionState(1, 1, (1,), 1))
    topic.set_assignment(Assignment(topic.assignment.topic_id, {0: [1], 1: [1]}), 1)
    seen.add(topic.stamp)
    view.brokers = broker_infos([1])
    seen.add(view.brokers_stamp)
    assert len(seen) == 4
    again = TopicView("t", Assignment(uuid.uuid4(), {0: [1]}))
    assert again.stamp not in seen


def test_a_cold_request_for_every_topic_lets_others_run(monkeypatch: Any) -> None:
    """Encoding thousands of uncached partitions gives the loop away between topics."""
    monkeypatch.setattr(metadata, "SECONDS_PER_TURN", 0.0)
    view = ClusterView()
    view.brokers = broker_infos([1, 2, 3])
    for i in range(50):
        topic = TopicView(f"t{i:02d}", Assignment(uuid.uuid4(), {p: [1, 2, 3] for p in range(40)}))
        for p in range(40):
            topic.set_state(p, PartitionState(1 + p % 3, 1, (1, 2, 3), 1))
        view.topics[topic.name] = topic
    broker = services(view)
    turns = 0

    async def other() -> None:
        nonlocal turns
        while True:
            await asyncio.sleep(0)
            turns += 1

    async def main() -> list[bytes]:
        task = asyncio.create_task(other())
        await asyncio.sleep(0)
        ctx = RequestContext(broker, 3, 12, 1, None, "127.0.0.1")
        try:
            return await metadata.handle(ctx, request(12, None, False))
        finally:
            task.cancel()

    asyncio.run(main())
    assert turns >= 40
    ctx = RequestContext(broker, 3, 12, 1, None, "127.0.0.1")
    assert answer(broker, 12, None, False) == reference_response(ctx, None, False)
