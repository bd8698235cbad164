"""kafkajs's transactions against chronik: a transactional producer commits records on two
partitions together with a group's offset, aborts another transaction, and kafkajs
consumers with readUncommitted false and true see what Kafka would show them."""

from __future__ import annotations

import json
import subprocess

from .helpers import topic_name
from .test_client_kafkajs import COMPAT, pytestmark  # noqa: F401  (skips without node)

SCRIPT = COMPAT / "kafkajs_transactions.js"


def test_kafkajs_transactions(broker_process):
    job = {
        "bootstrap": broker_process.bootstrap,
        "topic": topic_name("jstxn"),
        "input": topic_name("jsin"),
        "group": topic_name("jsg"),
        "transactionalId": topic_name("jstid"),
    }
    proc = subprocess.run(
        ["node", str(SCRIPT)],
        input=json.dumps(job).encode(),
        capture_output=True,
        timeout=180,
        cwd=COMPAT,
    )
    assert proc.returncode == 0, proc.stderr.decode()[-4000:]
    out = json.loads(proc.stdout)
    assert out["committed"] == ["c0", "c1", "c2", "c3"]
    assert out["uncommitted"] == ["a0", "a1", "c0", "c1", "c2", "c3"]
    (topic,) = out["offsets"]
    assert topic["partitions"] == [{"partition": 0, "offset": "5", "metadata": None}]
