"""kafkajs's transactions against chronik: a transactional producer commits records on two
partitions together with a group's offset, aborts another transaction, and kafkajs
consumers with readUncommitted false and true see what Kafka would show them."""

from __future__ import annotations

from .helpers import topic_name
from .test_client_kafkajs import COMPAT, kafkajs, pytestmark  # noqa: F401  (skips without node)


def test_kafkajs_transactions(broker_process):
    out = kafkajs(
        broker_process.bootstrap,
        topic_name("jstxn"),
        script=COMPAT / "kafkajs_transactions.js",
        input=topic_name("jsin"),
        group=topic_name("jsg"),
        transactionalId=topic_name("jstid"),
    )
    assert out["committed"] == ["c0", "c1", "c2", "c3"]
    assert out["uncommitted"] == ["a0", "a1", "c0", "c1", "c2", "c3"]
    (topic,) = out["offsets"]
    assert topic["partitions"] == [{"partition": 0, "offset": "5", "metadata": None}]
