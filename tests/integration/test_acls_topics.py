"""ACLs on the topic, data and admin APIs, driven by real clients against one broker
with `authorizer.class.name=chronik` and `super.users=User:admin`: what each refusal
answers (Kafka's error codes), that nothing refused is written, created or changed,
and that an ACL change applies to the next request on a connection already open.

alice signs in with SASL PLAIN; the PLAINTEXT listener's clients are User:ANONYMOUS,
which the raw-protocol checks use to see the fields clients hide."""

from __future__ import annotations

import dataclasses
import datetime
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from chronik.records.builder import Record, build_batch
from conftest import BrokerProcess, free_port

from .helpers import RawClient, code, fetch_request, nested, req, topic_name

ROOT = Path(__file__).resolve().parents[2]
ADMIN, ADMIN_PASSWORD = "admin", "admin-Pa55word"
ALICE, ALICE_PASSWORD = "alice", "alice-Secret-42"
ANONYMOUS = "User:ANONYMOUS"
TOPIC_AUTHORIZATION_FAILED = 29
CLUSTER_AUTHORIZATION_FAILED = 31
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
OPERATIONS_OMITTED = -(2**31)
# Kafka's operation codes (AclOperation), for the authorized-operations bit sets.
READ, WRITE, DESCRIBE, DESCRIBE_CONFIGS = 3, 4, 8, 10


class Secured:
    def __init__(self, broker: BrokerProcess, sasl_port: int) -> None:
        self.broker = broker
        self.plaintext = broker.bootstrap
        self.sasl = f"127.0.0.1:{sasl_port}"

    def conf(self, user: str = ALICE, password: str = ALICE_PASSWORD) -> dict[str, Any]:
        return {
            "bootstrap.servers": self.sasl,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": user,
            "sasl.password": password,
        }

    def admin_conf(self) -> dict[str, Any]:
        return self.conf(ADMIN, ADMIN_PASSWORD)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    data = tmp_path_factory.mktemp("acl-topics") / "data"
    for user, password in ((ADMIN, ADMIN_PASSWORD), (ALICE, ALICE_PASSWORD)):
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "chronik",
                "users",
                "add",
                user,
                "--password-stdin",
                "--data-dir",
                str(data),
            ],
            input=password + "\n",
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
        )
        assert done.returncode == 0, done.stderr
    broker = BrokerProcess(data)
    sasl_port = free_port()
    broker.config.update(
        {
            "listeners": f"PLAINTEXT://127.0.0.1:{broker.port},"
            f"SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
            "sasl.enabled.mechanisms": "PLAIN",
            "authorizer.class.name": "chronik",
            "super.users": f"User:{ADMIN}",
        }
    )
    broker.start()
    try:
        yield Secured(broker, sasl_port)
    finally:
        broker.kill()


@pytest.fixture(scope="module")
def admin(secured: Secured) -> AdminClient:
    return AdminClient(secured.admin_conf())


def binding(
    name: str,
    operation: AclOperation,
    principal: str = f"User:{ALICE}",
    permission: AclPermissionType = AclPermissionType.ALLOW,
    pattern: ResourcePatternType = ResourcePatternType.LITERAL,
    host: str = "*",
    resource: ResourceType = ResourceType.TOPIC,
) -> AclBinding:
    return AclBinding(resource, name, pattern, principal, host, operation, permission)


def allow(admin: AdminClient, *bindings: AclBinding) -> None:
    for future in admin.create_acls(list(bindings), request_timeout=10).values():
        future.result()


def revoke(admin: AdminClient, *bindings: AclBinding) -> None:
    filters = [
        AclBindingFilter(
            b.restype,
            b.name,
            b.resource_pattern_type,
            b.principal,
            b.host,
            b.operation,
            b.permission_type,
        )
        for b in bindings
    ]
    for future in admin.delete_acls(filters, request_timeout=10).values():
        assert future.result(), "no ACL matched"


def create(admin: AdminClient, name: str, partitions: int = 1) -> None:
    admin.create_topics([NewTopic(name, partitions, 1)], request_timeout=15)[name].result()


def end_offset(secured: Secured, topic: str) -> int:
    """The topic's end offset, as the super user sees it."""
    consumer = Consumer({**secured.admin_conf(), "group.id": "acl-probe"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    finally:
        consumer.close()


def produce(producer: Producer, topic: str, value: bytes = b"v") -> KafkaError | None:
    """One record through ``producer``: its delivery error, or None once written."""
    outcome: list[KafkaError | None] = []
    producer.produce(topic, value, on_delivery=lambda err, _msg: outcome.append(err))
    assert producer.flush(20) == 0
    return outcome[0]


def producer_for(conf: dict[str, Any]) -> Producer:
    return Producer({**conf, "message.timeout.ms": 10000, "retries": 0})


def error_code(err: KafkaError | None) -> int | None:
    return None if err is None else err.code()


def refused_with(future: Any) -> int:
    with pytest.raises(KafkaException) as info:
        future.result()
    return info.value.args[0].code()


def test_produce_without_write_appends_nothing(secured: Secured, admin: AdminClient) -> None:
    topic = topic_name("acl-w")
    create(admin, topic)
    assert produce(producer_for(secured.admin_conf()), topic) is None
    # alice may see the topic, so what refuses her is the Produce request itself.
    allow(admin, binding(topic, AclOperation.DESCRIBE))
    err = produce(producer_for(secured.conf()), topic, b"refused")
    assert error_code(err) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert end_offset(secured, topic) == 1

    # kafka-python hears the same refusal.
    from kafka import KafkaProducer
    from kafka.errors import TopicAuthorizationFailedError

    producer = KafkaProducer(
        bootstrap_servers=secured.sasl,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN",
        sasl_plain_username=ALICE,
        sasl_plain_password=ALICE_PASSWORD,
        retries=0,
    )
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            producer.send(topic, b"refused too").get(timeout=20)
    finally:
        producer.close(timeout=5)
    assert end_offset(secured, topic) == 1


def test_write_acl_applies_to_the_next_request_and_so_does_its_removal(
    secured: Secured, admin: AdminClient
) -> None:
    topic = topic_name("acl-next")
    create(admin, topic)
    allow(admin, binding(topic, AclOperation.DESCRIBE))
    # A new producer for each step: librdkafka keeps a topic's authorization error
    # until its next metadata refresh (minutes). The raw test below keeps one connection.
    refused = produce(producer_for(secured.conf()), topic)
    assert error_code(refused) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    write = binding(topic, AclOperation.WRITE)
    allow(admin, write)
    assert produce(producer_for(secured.conf()), topic, b"allowed") is None
    assert end_offset(secured, topic) == 1
    revoke(admin, write)
    refused = produce(producer_for(secured.conf()), topic)
    assert error_code(refused) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert end_offset(secured, topic) == 1


def _produce(topic: str, transactional_id: str | None = None) -> Any:
    """A Produce v9 of one record to partitions 0 and 1 of ``topic``."""
    from kio.schema.produce.v9 import request as produce_v9

    def batch() -> bytes:
        return build_batch([Record(1_700_000_000_000, None, b"raw")])

    return produce_v9.ProduceRequest(
        transactional_id=transactional_id,
        acks=1,
        timeout=datetime.timedelta(seconds=5),
        topic_data=(
            produce_v9.TopicProduceData(
                name=topic,
                partition_data=tuple(
                    produce_v9.PartitionProduceData(index=i, records=batch()) for i in (0, 1)
                ),
            ),
        ),
    )


def _codes(response: Any) -> list[int]:
    return [code(p.error_code) for t in response.responses for p in t.partition_responses]


def test_acl_changes_apply_on_an_open_connection(secured: Secured, admin: AdminClient) -> None:
    topic = topic_name("acl-conn")
    create(admin, topic, partitions=2)
    write = binding(topic, AclOperation.WRITE, principal=ANONYMOUS)
    with RawClient(secured.plaintext) as raw:
        assert _codes(raw.request(_produce(topic))) == [TOPIC_AUTHORIZATION_FAILED] * 2
        allow(admin, write)
        assert _codes(raw.request(_produce(topic))) == [0, 0]
        # A transactional id needs WRITE on it: every partition refused, nothing written.
        answer = raw.request(_produce(topic, transactional_id=topic_name("acl-tx")))
        assert _codes(answer) == [TRANSACTIONAL_ID_AUTHORIZATION_FAILED] * 2
        revoke(admin, write)
        assert _codes(raw.request(_produce(topic))) == [TOPIC_AUTHORIZATION_FAILED] * 2
        # An unknown topic it may not describe is refused, not reported missing.
        missing = topic_name("acl-none")
        assert _codes(raw.request(_produce(missing))) == [TOPIC_AUTHORIZATION_FAILED] * 2
    assert end_offset(secured, topic) == 1


def test_metadata_shows_only_what_may_be_described(secured: Secured, admin: AdminClient) -> None:
    seen, hidden = topic_name("acl-seen"), topic_name("acl-hidden")
    create(admin, seen)
    create(admin, hidden)
    allow(admin, binding(seen, AclOperation.DESCRIBE))
    alice = AdminClient(secured.conf())
    listed = alice.list_topics(timeout=10).topics
    assert seen in listed
    assert hidden not in listed
    assert not [t for t in listed if t.startswith("acl-hidden")]
    everything = admin.list_topics(timeout=10).topics
    assert seen in everything and hidden in everything

    named = alice.list_topics(topic=hidden, timeout=10).topics[hidden]
    assert named.error is not None
    assert named.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert named.partitions == {}


def _metadata(name: str, auto: bool = False, operations: bool = False) -> Any:
    return req(
        3,
        9,
        topics=(nested(3, 9, "MetadataRequestTopic", name=name),),
        allow_auto_topic_creation=auto,
        include_cluster_authorized_operations=operations,
        include_topic_authorized_operations=operations,
    )


def test_auto_creation_needs_create(secured: Secured, admin: AdminClient) -> None:
    missing = topic_name("acl-auto")
    allow(admin, binding(missing, AclOperation.DESCRIBE, principal=ANONYMOUS))
    with RawClient(secured.plaintext) as raw:
        (answer,) = raw.request(_metadata(missing, auto=True)).topics
        assert code(answer.error_code) == TOPIC_AUTHORIZATION_FAILED
        assert missing not in admin.list_topics(timeout=10).topics
        # Without DESCRIBE the same name is refused as well, before anything else.
        other = topic_name("acl-auto")
        (answer,) = raw.request(_metadata(other, auto=True)).topics
        assert code(answer.error_code) == TOPIC_AUTHORIZATION_FAILED
        assert other not in admin.list_topics(timeout=10).topics

        allow(admin, binding(missing, AclOperation.CREATE, principal=ANONYMOUS))
        (answer,) = raw.request(_metadata(missing, auto=True)).topics
        assert code(answer.error_code) == 0
        assert len(answer.partitions) >= 1
    assert missing in admin.list_topics(timeout=10).topics


def _consume_one(conf: dict[str, Any], topic: str) -> tuple[bytes | None, list[int]]:
    """Assigned (no group membership) at offset 0: the first record, and the error codes
    heard before it."""
    consumer = Consumer({**conf, "group.id": topic_name("acl-g"), "enable.auto.commit": False})
    heard: list[int] = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        for _ in range(40):
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                heard.append(msg.error().code())
                if msg.error().code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                    return None, heard
                continue
            return msg.value(), heard
        return None, heard
    finally:
        consumer.close()


def test_consume_needs_read(secured: Secured, admin: AdminClient) -> None:
    topic = topic_name("acl-r")
    create(admin, topic)
    assert produce(producer_for(secured.admin_conf()), topic, b"secret") is None
    allow(admin, binding(topic, AclOperation.DESCRIBE))
    value, heard = _consume_one(secured.conf(), topic)
    assert value is None
    assert KafkaError.TOPIC_AUTHORIZATION_FAILED in heard
    allow(admin, binding(topic, AclOperation.READ))
    value, heard = _consume_one(secured.conf(), topic)
    assert value == b"secret"
    assert KafkaError.TOPIC_AUTHORIZATION_FAILED not in heard


def test_deny_beats_allow_and_prefixed_allow_covers_its_prefix(
    secured: Secured, admin: AdminClient
) -> None:
    prefix = topic_name("acl-pfx") + "."
    covered, denied, outside = prefix + "a", prefix + "b", topic_name("acl-out")
    for t in (covered, denied, outside):
        create(admin, t)
    allow(
        admin,
        binding(prefix, AclOperation.WRITE, pattern=ResourcePatternType.PREFIXED),
        binding(denied, AclOperation.WRITE, permission=AclPermissionType.DENY),
        binding(outside, AclOperation.DESCRIBE),
    )
    producer = producer_for(secured.conf())
    assert produce(producer, covered) is None
    assert error_code(produce(producer, denied)) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert error_code(produce(producer, outside)) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert [end_offset(secured, t) for t in (covered, denied, outside)] == [1, 0, 0]


def test_an_acl_for_another_host_does_not_apply(secured: Secured, admin: AdminClient) -> None:
    topic = topic_name("acl-host")
    create(admin, topic)
    allow(
        admin,
        binding(topic, AclOperation.DESCRIBE),
        binding(topic, AclOperation.WRITE, host="10.9.8.7"),
    )
    refused = produce(producer_for(secured.conf()), topic)
    assert error_code(refused) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    allow(admin, binding(topic, AclOperation.WRITE, host="127.0.0.1"))
    assert produce(producer_for(secured.conf()), topic) is None
    assert end_offset(secured, topic) == 1


def test_topic_admin_and_configs_are_refused_but_not_to_a_super_user(
    secured: Secured, admin: AdminClient
) -> None:
    alice = AdminClient(secured.conf())
    fresh, existing = topic_name("acl-new"), topic_name("acl-old")
    made = alice.create_topics([NewTopic(fresh, 1, 1)], request_timeout=10)[fresh]
    assert refused_with(made) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert fresh not in admin.list_topics(timeout=10).topics

    create(admin, existing)
    allow(admin, binding(existing, AclOperation.DESCRIBE))
    gone = alice.delete_topics([existing], request_timeout=10)[existing]
    assert refused_with(gone) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert existing in admin.list_topics(timeout=10).topics

    resource = ConfigResource(ConfigResource.Type.TOPIC, existing)
    described = alice.describe_configs([resource], request_timeout=10)[resource]
    assert refused_with(described) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    (node,) = admin.list_topics(timeout=10).brokers
    broker_resource = ConfigResource(ConfigResource.Type.BROKER, str(node))
    described = alice.describe_configs([broker_resource], request_timeout=10)[broker_resource]
    assert refused_with(described) == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    change = ConfigResource(
        ConfigResource.Type.TOPIC,
        existing,
        incremental_configs=[
            ConfigEntry("retention.ms", "60000", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    altered = alice.incremental_alter_configs([change], request_timeout=10)[change]
    assert refused_with(altered) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # The super user sees the override absent, then sets it, and deletes the topic.
    configs = admin.describe_configs([resource], request_timeout=10)[resource].result()
    assert configs["retention.ms"].value != "60000"
    admin.incremental_alter_configs([change], request_timeout=10)[change].result()
    configs = admin.describe_configs([resource], request_timeout=10)[resource].result()
    assert configs["retention.ms"].value == "60000"
    admin.delete_topics([existing], request_timeout=10)[existing].result()

    # CREATE on the topic lets alice create it; DESCRIBE_CONFIGS is what tells her its
    # configs, which is not hers here (the topic is created all the same).
    allow(admin, binding(fresh, AclOperation.CREATE))
    alice.create_topics([NewTopic(fresh, 2, 1)], request_timeout=10)[fresh].result()
    assert len(admin.list_topics(timeout=10).topics[fresh].partitions) == 2


def test_create_topics_answers_configs_only_with_describe_configs(
    secured: Secured, admin: AdminClient
) -> None:
    blind, seeing = topic_name("acl-blind"), topic_name("acl-seeing")
    allow(
        admin,
        binding(blind, AclOperation.CREATE, principal=ANONYMOUS),
        binding(seeing, AclOperation.CREATE, principal=ANONYMOUS),
        binding(seeing, AclOperation.DESCRIBE_CONFIGS, principal=ANONYMOUS),
    )
    refused = topic_name("acl-nocreate")
    wanted = tuple(
        nested(
            19,
            7,
            "CreatableTopic",
            name=n,
            num_partitions=1,
            replication_factor=1,
            assignments=(),
            configs=(),
        )
        for n in (blind, seeing, refused)
    )
    with RawClient(secured.plaintext) as raw:
        answer = raw.request(req(19, 7, topics=wanted, timeout=15000, validate_only=False))
    by_name = {t.name: t for t in answer.topics}
    assert code(by_name[blind].error_code) == 0
    assert code(by_name[blind].topic_config_error_code) == TOPIC_AUTHORIZATION_FAILED
    assert by_name[blind].num_partitions == -1 and not by_name[blind].configs
    assert code(by_name[seeing].error_code) == 0
    assert code(by_name[seeing].topic_config_error_code) == 0
    assert by_name[seeing].num_partitions == 1 and by_name[seeing].configs
    assert code(by_name[refused].error_code) == TOPIC_AUTHORIZATION_FAILED
    listed = admin.list_topics(timeout=10).topics
    assert blind in listed and seeing in listed and refused not in listed


def test_follower_fetch_needs_cluster_action(secured: Secured, admin: AdminClient) -> None:
    topic = topic_name("acl-follow")
    create(admin, topic)
    assert produce(producer_for(secured.admin_conf()), topic, b"replicated") is None
    allow(admin, binding(topic, AclOperation.READ, principal=ANONYMOUS))
    with RawClient(secured.plaintext) as raw:
        consumer_fetch = fetch_request(topic, 0, 0)
        (answer,) = raw.request(consumer_fetch).responses
        (part,) = answer.partitions
        assert code(part.error_code) == 0 and part.records

        # Fetch v12 carries the replica id: broker 1 asking as a follower.
        follower_fetch = dataclasses.replace(fetch_request(topic, 0, 0), replica_id=1)
        (answer,) = raw.request(follower_fetch).responses
        (part,) = answer.partitions
        assert code(part.error_code) == TOPIC_AUTHORIZATION_FAILED
        assert not part.records


def test_metadata_and_describe_cluster_authorized_operations(
    secured: Secured, admin: AdminClient
) -> None:
    topic = topic_name("acl-ops")
    create(admin, topic)
    allow(
        admin,
        binding(topic, AclOperation.READ, principal=ANONYMOUS),
        binding(topic, AclOperation.ALTER_CONFIGS, principal=ANONYMOUS),
    )
    with RawClient(secured.plaintext) as raw:
        asked = _metadata(topic, operations=True)
        answer = raw.request(asked)
        (entry,) = answer.topics
        assert code(entry.error_code) == 0
        # READ implies DESCRIBE, ALTER_CONFIGS implies DESCRIBE_CONFIGS.
        expected = sum(1 << op for op in (READ, DESCRIBE, DESCRIBE_CONFIGS, 11))
        assert entry.topic_authorized_operations == expected
        assert answer.cluster_authorized_operations == 0  # no DESCRIBE on the cluster

        plain = raw.request(_metadata(topic))
        assert plain.topics[0].topic_authorized_operations == OPERATIONS_OMITTED
        assert plain.cluster_authorized_operations == OPERATIONS_OMITTED

        described = raw.request(req(60, 0, include_cluster_authorized_operations=True))
        assert code(described.error_code) == 0 and described.cluster_authorized_operations == 0
        on_cluster = binding(
            "kafka-cluster",
            AclOperation.DESCRIBE,
            principal=ANONYMOUS,
            resource=ResourceType.BROKER,
        )
        allow(admin, on_cluster)
        try:
            answer = raw.request(asked)
            assert answer.cluster_authorized_operations == 1 << DESCRIBE
            described = raw.request(req(60, 0, include_cluster_authorized_operations=True))
            assert described.cluster_authorized_operations == 1 << DESCRIBE
        finally:
            revoke(admin, on_cluster)


def test_cluster_apis_are_refused_to_others(secured: Secured, admin: AdminClient) -> None:
    with RawClient(secured.plaintext) as raw:
        wanted = nested(43, 1, "TopicPartitions", topic="acl-any", partitions=(0,))
        elect = raw.request(req(43, 1, election_type=0, topic_partitions=(wanted,), timeout=5000))
        assert code(elect.error_code) == CLUSTER_AUTHORIZATION_FAILED
        (result,) = elect.replica_election_results
        assert code(result.partition_result[0].error_code) == CLUSTER_AUTHORIZATION_FAILED
        users = raw.request(req(50, 0, users=(nested(50, 0, "UserName", name=ALICE),)))
        assert code(users.error_code) == CLUSTER_AUTHORIZATION_FAILED
        deletion = nested(51, 0, "ScramCredentialDeletion", name=ALICE, mechanism=1)
        altered = raw.request(req(51, 0, deletions=(deletion,), upsertions=()))
        assert [code(r.error_code) for r in altered.results] == [CLUSTER_AUTHORIZATION_FAILED]
    # alice's credentials are still there: she still signs in.
    assert AdminClient(secured.conf()).list_topics(timeout=10) is not None
