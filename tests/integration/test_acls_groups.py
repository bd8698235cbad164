"""ACLs on the consumer-group and transaction APIs, driven by real clients against one
broker with `authorizer.class.name=chronik` and `super.users=User:admin`: what a
principal may do with groups, committed offsets, transactional ids and idempotent
producer ids is what its ACLs allow, with Kafka's error codes; a change applies to the
next request. Raw requests check the fields clients hide."""

from __future__ import annotations

import struct
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from chronik.cli.transactions import DescribedTransaction, read_describe_transactions

from .helpers import RawClient, nested, req, wait_until
from .test_security import (
    ADMIN,
    ADMIN_PASSWORD,
    ALICE,
    ALICE_PASSWORD,
    SecureBroker,
    start_secure_broker,
)

BOB, BOB_PASSWORD = "bob", "bob-Pa55word-9"
LISTENER = "SASL_PLAINTEXT"
GROUP_AUTHORIZATION_FAILED = 30
TOPIC_AUTHORIZATION_FAILED = 29
CLUSTER_AUTHORIZATION_FAILED = 31
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
OPERATION_NOT_ATTEMPTED = 55
OPERATIONS_OMITTED = -(2**31)
# Kafka's operation codes, as bits of authorized_operations.
READ, WRITE, DELETE, DESCRIBE = 3, 4, 6, 8


@pytest.fixture(scope="module")
def acl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    sb = start_secure_broker(
        tmp_path_factory.mktemp("acl-groups"),
        **{
            "authorizer.class.name": "chronik",
            "super.users": "User:admin",
            "allow.everyone.if.no.acl.found": "false",
            "group.initial.rebalance.delay.ms": "0",
        },
    )
    try:
        # A third user with no ACLs at all, added over the protocol by the super user.
        upsert = UserScramCredentialUpsertion(
            BOB, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), BOB_PASSWORD.encode()
        )
        for future in admin_client(sb).alter_user_scram_credentials([upsert]).values():
            future.result(timeout=30)
        yield sb
    finally:
        sb.broker.kill()


# --- helpers --------------------------------------------------------------------------


def conf_of(sb: SecureBroker, user: str) -> dict[str, Any]:
    if user == BOB:
        return sb.conf(LISTENER, "SCRAM-SHA-512", BOB, BOB_PASSWORD)
    password = ADMIN_PASSWORD if user == ADMIN else ALICE_PASSWORD
    return sb.conf(LISTENER, "PLAIN", user, password)


_ADMINS: dict[tuple[int, str], AdminClient] = {}


def admin_client(sb: SecureBroker, user: str = ADMIN) -> AdminClient:
    """One client per broker and user, kept alive while its futures resolve."""
    key = (sb.broker.port, user)
    if key not in _ADMINS:
        _ADMINS[key] = AdminClient(conf_of(sb, user))
    return _ADMINS[key]


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def allow(
    rtype: ResourceType,
    name: str,
    op: AclOperation,
    principal: str = f"User:{ALICE}",
    pattern: ResourcePatternType = ResourcePatternType.LITERAL,
) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, "*", op, AclPermissionType.ALLOW)


def grant(sb: SecureBroker, *bindings: AclBinding) -> None:
    for future in admin_client(sb).create_acls(list(bindings)).values():
        future.result(timeout=30)


def revoke(sb: SecureBroker, binding: AclBinding) -> None:
    f = AclBindingFilter(
        binding.restype,
        binding.name,
        binding.resource_pattern_type,
        binding.principal,
        binding.host,
        binding.operation,
        binding.permission_type,
    )
    for future in admin_client(sb).delete_acls([f]).values():
        assert len(future.result(timeout=30)) == 1


def make_topic(sb: SecureBroker, prefix: str, records: int = 0) -> str:
    name = unique(prefix)
    admin = admin_client(sb)
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(timeout=30)
    wait_until(lambda: name in admin.list_topics(timeout=10).topics, f"{name} in metadata")
    if records:
        producer = Producer(conf_of(sb, ADMIN))
        for i in range(records):
            producer.produce(name, b"v%d" % i)
        assert producer.flush(20) == 0
    return name


def committed(sb: SecureBroker, group: str, topic: str) -> int:
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0)])
    result = admin_client(sb).list_consumer_group_offsets([request])[group].result(timeout=30)
    return result.topic_partitions[0].offset


def commit_code(consumer: Consumer, topic: str, offset: int) -> int:
    try:
        out = consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    except KafkaException as exc:
        return exc.args[0].code()
    errors = [tp.error.code() for tp in out if tp.error is not None]
    return errors[0] if errors else 0


def assigned_consumer(sb: SecureBroker, user: str, group: str, topic: str) -> Consumer:
    consumer = Consumer({**conf_of(sb, user), "group.id": group, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    return consumer


def raw_as(sb: SecureBroker, user: str, password: str) -> RawClient:
    """A raw connection to the SASL listener, authenticated with PLAIN."""
    raw = RawClient(sb.bootstrap(LISTENER))
    assert int(raw.request(req(17, 1, mechanism="PLAIN")).error_code) == 0
    token = b"\0" + user.encode() + b"\0" + password.encode()
    answer = raw.request(req(36, 2, auth_bytes=token))
    assert int(answer.error_code) == 0, answer
    return raw


def codes(topics: Any, field: str = "error_code", parts: str = "partitions") -> dict:
    return {
        (t.name, int(p.partition_index)): int(getattr(p, field))
        for t in topics
        for p in getattr(t, parts)
    }


# --- consumer groups ------------------------------------------------------------------


def test_prefixed_group_acl_lets_a_group_read_and_commit(acl: SecureBroker) -> None:
    topic = make_topic(acl, "acl-read", records=5)
    grant(
        acl,
        allow(ResourceType.GROUP, "team-", AclOperation.READ, pattern=ResourcePatternType.PREFIXED),
        allow(ResourceType.TOPIC, topic, AclOperation.READ),
    )
    group = unique("team-a")
    consumer = Consumer(
        {
            **conf_of(acl, ALICE),
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 20
    try:
        while len(got) < 5 and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None:
                assert msg.error() is None, msg.error()
                got.append(msg.value())
        assert got == [b"v%d" % i for i in range(5)]
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    assert committed(acl, group, topic) == 5

    # A group outside the prefix: the consumer is told, and nothing is committed.
    outside = unique("other")
    stranger = Consumer(
        {**conf_of(acl, ALICE), "group.id": outside, "auto.offset.reset": "earliest"}
    )
    stranger.subscribe([topic])
    seen: list[int] = []
    deadline = time.monotonic() + 15
    try:
        while GROUP_AUTHORIZATION_FAILED not in seen and time.monotonic() < deadline:
            msg = stranger.poll(0.2)
            if msg is not None:
                assert msg.error() is not None, "read without a group ACL"
                seen.append(msg.error().code())
    finally:
        stranger.close()
    assert GROUP_AUTHORIZATION_FAILED in seen
    assert committed(acl, outside, topic) < 0


def test_removing_the_group_acl_applies_to_the_next_commit(acl: SecureBroker) -> None:
    topic = make_topic(acl, "acl-revoke", records=3)
    group = unique("revoke")
    group_acl = allow(ResourceType.GROUP, group, AclOperation.READ)
    grant(acl, group_acl, allow(ResourceType.TOPIC, topic, AclOperation.READ))
    consumer = assigned_consumer(acl, ALICE, group, topic)
    try:
        assert commit_code(consumer, topic, 1) == 0
        assert committed(acl, group, topic) == 1
        revoke(acl, group_acl)
        assert commit_code(consumer, topic, 2) == GROUP_AUTHORIZATION_FAILED
    finally:
        consumer.close()
    assert committed(acl, group, topic) == 1


def test_commit_on_a_topic_without_read(acl: SecureBroker) -> None:
    """READ on the group but not the topic: TOPIC_AUTHORIZATION_FAILED, nothing stored."""
    topic = make_topic(acl, "acl-noread")
    group = unique("team-noread")  # the prefixed READ of the first test, or:
    grant(acl, allow(ResourceType.GROUP, group, AclOperation.READ))
    consumer = assigned_consumer(acl, ALICE, group, topic)
    try:
        assert commit_code(consumer, topic, 1) == TOPIC_AUTHORIZATION_FAILED
    finally:
        consumer.close()
    assert committed(acl, group, topic) < 0


def _make_group(sb: SecureBroker, group: str, topic: str) -> None:
    """An Empty group with a committed offset, made by the super user."""
    consumer = assigned_consumer(sb, ADMIN, group, topic)
    try:
        assert commit_code(consumer, topic, 1) == 0
    finally:
        consumer.close()


def test_list_and_describe_groups_show_only_what_the_principal_may_describe(
    acl: SecureBroker,
) -> None:
    topic = make_topic(acl, "acl-list", records=1)
    visible, hidden = unique("vis"), unique("hid")
    _make_group(acl, visible, topic)
    _make_group(acl, hidden, topic)
    grant(acl, allow(ResourceType.GROUP, visible, AclOperation.DESCRIBE))

    def listed(user: str) -> set[str]:
        result = admin_client(acl, user).list_consumer_groups().result(timeout=30)
        return {g.group_id for g in result.valid}

    assert {visible, hidden} <= listed(ADMIN)
    alice_sees = listed(ALICE)
    assert visible in alice_sees
    assert hidden not in alice_sees

    # confluent-kafka: the bits of the principal's operations on the group.
    alice = admin_client(acl, ALICE)
    described = alice.describe_consumer_groups([visible], include_authorized_operations=True)
    assert described[visible].result(timeout=30).authorized_operations == [AclOperation.DESCRIBE]
    refused = alice.describe_consumer_groups([hidden])[hidden]
    with pytest.raises(KafkaException) as info:
        refused.result(timeout=30)
    assert info.value.args[0].code() == GROUP_AUTHORIZATION_FAILED
    everything = admin_client(acl).describe_consumer_groups(
        [visible], include_authorized_operations=True
    )
    assert set(everything[visible].result(timeout=30).authorized_operations) == {
        AclOperation.READ,
        AclOperation.DESCRIBE,
        AclOperation.DELETE,
    }

    # The raw response: the refused group has nothing described.
    with raw_as(acl, ALICE, ALICE_PASSWORD) as raw:
        answer = raw.request(
            req(15, 5, groups=(visible, hidden), include_authorized_operations=True)
        )
        by_id = {g.group_id: g for g in answer.groups}
        assert int(by_id[visible].error_code) == 0
        assert by_id[visible].group_state == "Empty"
        assert by_id[visible].authorized_operations == 1 << DESCRIBE
        assert int(by_id[hidden].error_code) == GROUP_AUTHORIZATION_FAILED
        assert by_id[hidden].group_state == ""
        assert by_id[hidden].members == ()
        assert by_id[hidden].authorized_operations == OPERATIONS_OMITTED
        plain = raw.request(req(15, 5, groups=(visible,), include_authorized_operations=False))
        assert plain.groups[0].authorized_operations == OPERATIONS_OMITTED


def test_kafka_python_lists_and_deletes_groups_with_acls(acl: SecureBroker) -> None:
    from kafka.admin import KafkaAdminClient

    topic = make_topic(acl, "acl-kp", records=1)
    mine, theirs = unique("kp-mine"), unique("kp-theirs")
    _make_group(acl, mine, topic)
    _make_group(acl, theirs, topic)
    grant(acl, allow(ResourceType.GROUP, mine, AclOperation.DESCRIBE))
    client = KafkaAdminClient(
        bootstrap_servers=acl.bootstrap(LISTENER),
        security_protocol=LISTENER,
        sasl_mechanism="PLAIN",
        sasl_plain_username=ALICE,
        sasl_plain_password=ALICE_PASSWORD,
    )
    try:
        names = {g["group_id"] for g in client.list_groups()}
        assert mine in names
        assert theirs not in names
        # DESCRIBE finds the coordinator; deleting needs DELETE.
        assert client.delete_groups([mine]) == {mine: "GroupAuthorizationFailedError"}
        assert committed(acl, mine, topic) == 1
        grant(acl, allow(ResourceType.GROUP, mine, AclOperation.DELETE))
        assert client.delete_groups([mine]) == {mine: "OK"}
    finally:
        client.close()
    assert committed(acl, mine, topic) < 0


# --- transactions and idempotence -----------------------------------------------------


def test_transactional_producer_needs_write_on_its_transactional_id(acl: SecureBroker) -> None:
    topic = make_topic(acl, "acl-txn")
    txn_id = unique("tx")
    refused = Producer({**conf_of(acl, ALICE), "transactional.id": txn_id})
    with pytest.raises(KafkaException) as info:
        refused.init_transactions(15)
    assert info.value.args[0].code() == TRANSACTIONAL_ID_AUTHORIZATION_FAILED

    grant(
        acl,
        allow(ResourceType.TRANSACTIONAL_ID, txn_id, AclOperation.WRITE),
        allow(ResourceType.TOPIC, topic, AclOperation.WRITE),
    )
    producer = Producer({**conf_of(acl, ALICE), "transactional.id": txn_id})
    producer.init_transactions(15)
    producer.begin_transaction()
    producer.produce(topic, b"in a transaction")
    producer.commit_transaction(15)

    reader = Consumer(
        {
            **conf_of(acl, ADMIN),
            "group.id": unique("txn-reader"),
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    reader.assign([TopicPartition(topic, 0, 0)])
    try:
        msg = None
        deadline = time.monotonic() + 15
        while msg is None and time.monotonic() < deadline:
            msg = reader.poll(0.2)
        assert msg is not None and msg.error() is None
        assert msg.value() == b"in a transaction"
    finally:
        reader.close()


def test_idempotent_producer_needs_idempotent_write_or_write_on_a_topic(
    acl: SecureBroker,
) -> None:
    topic = make_topic(acl, "acl-idem")
    errors: list[KafkaError] = []
    refused = Producer(
        {
            **conf_of(acl, BOB),
            "enable.idempotence": True,
            "message.timeout.ms": 10000,
            "error_cb": errors.append,
        }
    )
    refused.produce(topic, b"must not land")
    deadline = time.monotonic() + 15
    while not any(e.code() == CLUSTER_AUTHORIZATION_FAILED for e in errors):
        assert time.monotonic() < deadline, errors
        try:
            refused.poll(0.2)
        except KafkaException as exc:  # the fatal error, raised by poll
            errors.append(exc.args[0])
    refused.purge()
    refused.flush(1)

    grant(acl, allow(ResourceType.TOPIC, topic, AclOperation.WRITE, principal=f"User:{BOB}"))
    delivered: list[Any] = []
    producer = Producer({**conf_of(acl, BOB), "enable.idempotence": True})
    producer.produce(topic, b"idempotent", on_delivery=lambda err, msg: delivered.append(err))
    assert producer.flush(20) == 0
    assert delivered == [None]

    # IDEMPOTENT_WRITE on the cluster is the other way (anonymous has no topic ACLs yet).
    with RawClient(acl.bootstrap("PLAINTEXT")) as raw:
        request = req(
            22,
            4,
            transactional_id=None,
            transaction_timeout=60000,
            producer_id=-1,
            producer_epoch=-1,
        )
        answer = raw.request(request)
        assert int(answer.error_code) == CLUSTER_AUTHORIZATION_FAILED
        assert (answer.producer_id, answer.producer_epoch) == (-1, -1)
        grant(
            acl,
            AclBinding(
                ResourceType.BROKER,
                "kafka-cluster",
                ResourcePatternType.LITERAL,
                "User:ANONYMOUS",
                "*",
                AclOperation.IDEMPOTENT_WRITE,
                AclPermissionType.ALLOW,
            ),
        )
        answer = raw.request(request)
        assert int(answer.error_code) == 0
        assert answer.producer_id >= 0


# --- raw requests -----------------------------------------------------------------------


def test_write_txn_markers_needs_cluster_action(acl: SecureBroker) -> None:
    topic = make_topic(acl, "acl-markers", records=2)
    marker = nested(
        27,
        1,
        "WritableTxnMarker",
        producer_id=1234,
        producer_epoch=0,
        transaction_result=True,
        topics=(nested(27, 1, "WritableTxnMarkerTopic", name=topic, partition_indexes=(0, 1)),),
        coordinator_epoch=0,
    )
    for raw in (RawClient(acl.bootstrap("PLAINTEXT")), raw_as(acl, ALICE, ALICE_PASSWORD)):
        with raw:
            answer = raw.request(req(27, 1, markers=(marker,)))
            assert [int(m.producer_id) for m in answer.markers] == [1234]
            assert codes(answer.markers[0].topics) == {
                (topic, 0): CLUSTER_AUTHORIZATION_FAILED,
                (topic, 1): CLUSTER_AUTHORIZATION_FAILED,
            }
    low, high = Consumer({**conf_of(acl, ADMIN), "group.id": "x"}).get_watermark_offsets(
        TopicPartition(topic, 0), timeout=10
    )
    assert (low, high) == (0, 2)  # no marker written


def test_add_partitions_to_txn_answers_per_partition(acl: SecureBroker) -> None:
    writable, other = make_topic(acl, "acl-apt-w"), make_topic(acl, "acl-apt-o")
    txn_id = unique("raw-tx")

    def add() -> dict:
        topics = tuple(
            nested(24, 3, "AddPartitionsToTxnTopic", name=name, partitions=(0,))
            for name in (writable, other)
        )
        request = req(
            24,
            3,
            v3_and_below_transactional_id=txn_id,
            v3_and_below_producer_id=0,
            v3_and_below_producer_epoch=0,
            v3_and_below_topics=topics,
        )
        with raw_as(acl, ALICE, ALICE_PASSWORD) as raw:
            answer = raw.request(request)
        return codes(
            answer.results_by_topic_v3_and_below, "partition_error_code", "results_by_partition"
        )

    assert add() == {
        (writable, 0): TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        (other, 0): TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    }
    grant(
        acl,
        allow(ResourceType.TRANSACTIONAL_ID, txn_id, AclOperation.WRITE),
        allow(ResourceType.TOPIC, writable, AclOperation.WRITE),
    )
    assert add() == {
        (writable, 0): OPERATION_NOT_ATTEMPTED,
        (other, 0): TOPIC_AUTHORIZATION_FAILED,
    }


def test_offset_fetch_and_find_coordinator_per_group(acl: SecureBroker) -> None:
    readable, secret = make_topic(acl, "acl-of-r"), make_topic(acl, "acl-of-s")
    group, refused = unique("ofetch"), unique("nogroup")
    consumer = assigned_consumer(acl, ADMIN, group, readable)
    try:
        assert commit_code(consumer, readable, 4) == 0
        assert commit_code(consumer, secret, 7) == 0
    finally:
        consumer.close()
    grant(
        acl,
        allow(ResourceType.GROUP, group, AclOperation.DESCRIBE),
        allow(ResourceType.TOPIC, readable, AclOperation.DESCRIBE),
    )
    with raw_as(acl, ALICE, ALICE_PASSWORD) as raw:
        found = raw.request(req(10, 4, key_type=0, coordinator_keys=(group, refused)))
        by_key = {c.key: c for c in found.coordinators}
        assert int(by_key[group].error_code) == 0
        assert int(by_key[refused].error_code) == GROUP_AUTHORIZATION_FAILED
        assert by_key[refused].node_id == -1

        def group_request(group_id: str, topics: Any) -> Any:
            return nested(9, 8, "OffsetFetchRequestGroup", group_id=group_id, topics=topics)

        named = tuple(
            nested(9, 8, "OffsetFetchRequestTopics", name=t, partition_indexes=(0,))
            for t in (readable, secret)
        )
        answer = raw.request(
            req(
                9,
                8,
                groups=(
                    group_request(group, named),
                    group_request(group, None),
                    group_request(refused, named),
                ),
                require_stable=False,
            )
        )
        asked, everything, not_allowed = answer.groups
        assert codes(asked.topics) == {(readable, 0): 0, (secret, 0): TOPIC_AUTHORIZATION_FAILED}
        offsets = {
            (t.name, int(p.partition_index)): p.committed_offset
            for t in asked.topics
            for p in t.partitions
        }
        assert offsets == {(readable, 0): 4, (secret, 0): -1}
        # All topics: the secret one is left out, not refused.
        assert [t.name for t in everything.topics] == [readable]
        assert int(not_allowed.error_code) == GROUP_AUTHORIZATION_FAILED
        assert not_allowed.topics == ()
        # v5 (single group): the group's refusal is the top-level error.
        old = raw.request(req(9, 5, group_id=refused, topics=None, require_stable=False))
        assert int(old.error_code) == GROUP_AUTHORIZATION_FAILED


def test_transactional_ids_listed_and_described_only_with_describe(acl: SecureBroker) -> None:
    topic = make_topic(acl, "acl-dtx")
    shown, kept = unique("shown-tx"), unique("kept-tx")
    for txn_id in (shown, kept):
        producer = Producer({**conf_of(acl, ADMIN), "transactional.id": txn_id})
        producer.init_transactions(15)
        producer.begin_transaction()
        producer.produce(topic, b"open")
        producer.flush(10)
    grant(acl, allow(ResourceType.TRANSACTIONAL_ID, shown, AclOperation.DESCRIBE))
    with raw_as(acl, ALICE, ALICE_PASSWORD) as raw:
        listed = raw.request(req(66, 0, state_filters=(), producer_id_filters=()))
        ids = {t.transactional_id for t in listed.transaction_states}
        assert shown in ids
        assert kept not in ids
        by_id = {s.transactional_id: s for s in describe(raw, shown, kept)}
    assert by_id[shown].error_code == 0
    assert by_id[shown].transaction_state == "Ongoing"
    # The open transaction's partition is of a topic alice may not describe.
    assert by_id[shown].topics == []
    assert by_id[kept].error_code == TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert by_id[kept].transaction_state == ""
    with raw_as(acl, ADMIN, ADMIN_PASSWORD) as raw:
        (state,) = describe(raw, shown)
    assert state.topics == [(topic, [0])]


def describe(raw: RawClient, *txn_ids: str) -> list[DescribedTransaction]:
    """DescribeTransactions, read with the CLI's reader (kio's refuses the start time -1
    of an answer with an error)."""
    sent = raw.send(req(65, 0, transactional_ids=txn_ids))
    (size,) = struct.unpack(">i", raw._read(4))
    frame = raw._read(size)
    assert struct.unpack_from(">i", frame)[0] == sent
    return read_describe_transactions(frame[5:])
