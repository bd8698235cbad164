"""What an operator runs to move a partition, run by the harness inside a client node's
namespace (so the network faults of the moment apply to it), through the Kafka protocol
with kafka-python's admin client, as Kafka's kafka-reassign-partitions and
kafka-leader-election tools do:

    python -m chaos.reassign_tool --bootstrap HOST:PORT,... alter TOPIC/P 1,2,3
    ... cancel TOPIC/P 1,2,3          # cancel; with nothing to cancel, alter to 1,2,3
    ... elect TOPIC/P                 # a preferred leader election
    ... throttle TOPIC/P --rate BYTES --leaders 1,2 --followers 3 --brokers 1,2,3
    ... unthrottle TOPIC/P --leaders 1,2 --followers 3 --brokers 1,2,3

``alter`` is AlterPartitionReassignments; ``cancel`` the same with a null target (the
reassignment in progress cancelled) and, when the answer is NO_REASSIGNMENT_IN_PROGRESS
(it completed meanwhile), an alter to the replicas given; ``elect`` ElectLeaders
(preferred);
``throttle`` sets what the reassignment tool's --throttle sets: the leader and follower
throttled rates of ``--brokers`` (dynamic broker configs) and the partition's
``<p>:<broker>`` pairs appended to the topic's leader/follower throttled replicas
(IncrementalAlterConfigs); ``unthrottle`` takes them away again (its --verify).

It prints one JSON line, ``{"ok": bool, "error": text or null, "done": text}``
(``error``: the partition's error name, or the exception that stopped the request;
``done``: what ``cancel`` did, ``cancelled`` or ``reassigned``), and exits 0 when ok.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

REQUEST_TIMEOUT_MS = 10_000
# A bootstrap broker that takes the connection but never answers (paused) would
# otherwise hold the admin client for kafka-python's default of 30 s.
BOOTSTRAP_TIMEOUT_MS = 8_000


def _ids(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def _admin(bootstrap: str) -> Any:
    from kafka import KafkaAdminClient

    return KafkaAdminClient(bootstrap_servers=bootstrap.split(","),
                            client_id="chaos-reassign-tool",
                            request_timeout_ms=REQUEST_TIMEOUT_MS,
                            bootstrap_timeout_ms=BOOTSTRAP_TIMEOUT_MS)


def _partition(key: str) -> tuple[str, int]:
    topic, _, p = key.rpartition("/")
    return topic, int(p)


def alter(admin: Any, key: str, replicas: list[int] | None) -> str | None:
    from kafka import TopicPartition

    topic, p = _partition(key)
    results = admin.alter_partition_reassignments({TopicPartition(topic, p): replicas},
                                                  timeout_ms=REQUEST_TIMEOUT_MS)
    if TopicPartition(topic, p) not in results:
        return "the partition is missing from the answer"
    error = results[TopicPartition(topic, p)]
    return None if error is None else error.__name__


def elect(admin: Any, key: str) -> str | None:
    topic, p = _partition(key)
    admin.elect_leaders(0, {topic: [p]}, timeout_ms=REQUEST_TIMEOUT_MS)
    return None


def throttle(admin: Any, key: str, rate: int | None, leaders: list[int],
             followers: list[int], brokers: list[int]) -> str | None:
    from kafka.admin import AlterConfigOp, ConfigResource, ConfigResourceType

    topic, p = _partition(key)
    list_op = AlterConfigOp.APPEND if rate is not None else AlterConfigOp.SUBTRACT
    configs: dict[str, Any] = {}
    if leaders:
        configs["leader.replication.throttled.replicas"] = (
            list_op, ",".join(f"{p}:{b}" for b in leaders))
    if followers:
        configs["follower.replication.throttled.replicas"] = (
            list_op, ",".join(f"{p}:{b}" for b in followers))
    resources = [ConfigResource(ConfigResourceType.TOPIC, topic, configs)]
    rate_op = (AlterConfigOp.SET, str(rate)) if rate is not None else (AlterConfigOp.DELETE, None)
    resources += [ConfigResource(ConfigResourceType.BROKER, str(b), {
        "leader.replication.throttled.rate": rate_op,
        "follower.replication.throttled.rate": rate_op,
    }) for b in brokers]
    outcome = admin.alter_configs(resources, raise_on_unknown=False, incremental=True)
    failed = [f"{kind} {name}: {result}" for kind, by_name in outcome.items()
              for name, result in by_name.items() if result != "OK"]
    return "; ".join(failed) or None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos.reassign_tool")
    parser.add_argument("--bootstrap", required=True)
    sub = parser.add_subparsers(dest="command", required=True)
    a = sub.add_parser("alter")
    a.add_argument("partition")
    a.add_argument("replicas")
    c = sub.add_parser("cancel")
    c.add_argument("partition")
    c.add_argument("replicas")
    e = sub.add_parser("elect")
    e.add_argument("partition")
    for name in ("throttle", "unthrottle"):
        t = sub.add_parser(name)
        t.add_argument("partition")
        if name == "throttle":
            t.add_argument("--rate", type=int, required=True)
        t.add_argument("--leaders", default="")
        t.add_argument("--followers", default="")
        t.add_argument("--brokers", default="")
    args = parser.parse_args(argv)
    error: str | None
    done = ""
    try:
        admin = _admin(args.bootstrap)
        try:
            if args.command == "alter":
                error = alter(admin, args.partition, _ids(args.replicas))
            elif args.command == "cancel":
                error, done = alter(admin, args.partition, None), "cancelled"
                if error == "NoReassignmentInProgressError":
                    error, done = alter(admin, args.partition, _ids(args.replicas)), "reassigned"
            elif args.command == "elect":
                error = elect(admin, args.partition)
            else:
                error = throttle(admin, args.partition,
                                 args.rate if args.command == "throttle" else None,
                                 _ids(args.leaders), _ids(args.followers), _ids(args.brokers))
        finally:
            admin.close()
    except Exception as exc:  # noqa: BLE001 - the harness reads the outcome, not a traceback
        error = f"{type(exc).__name__}: {exc}"
    print(json.dumps({"ok": error is None, "error": error, "done": done}), flush=True)
    return 0 if error is None else 1


if __name__ == "__main__":
    sys.exit(main())
