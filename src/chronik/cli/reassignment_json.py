"""The JSON files of kafka-reassign-partitions, read and written exactly as Kafka's
ReassignPartitionsCommand does, so plans pass between its tool and chronik's.

Topics to move (`--topics-to-move-json-file`; "version" optional, 1 when absent):

    {"version":1,"topics":[{"topic":"foo"},{"topic":"bar"}]}

A reassignment (`--reassignment-json-file`; written by --generate and --execute, in
topic then partition order, compact, "log_dirs" "any" for every replica):

    {"version":1,"partitions":[{"topic":"foo","partition":0,"replicas":[1,2,3],
     "log_dirs":["any","any","any"]}]}

"log_dirs" is optional, and must be as long as "replicas". chronik has one data
directory per broker, so every entry must be "any".
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

ANY_LOG_DIR = "any"
VERSION = 1

TopicPartition = tuple[str, int]


class BadReassignmentJson(ValueError):
    """The file is not in Kafka's format, or asks for something impossible."""


def _load(text: str, what: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadReassignmentJson(
            f"{what} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    if not isinstance(data, dict):
        raise BadReassignmentJson(f"{what} must be a JSON object")
    version = data.get("version", VERSION)
    if not _is_int(version):
        raise BadReassignmentJson(f"{what}: \"version\" must be an integer")
    if version != VERSION:
        raise BadReassignmentJson(f"{what}: Not supported version field value {version}")
    return data


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _list(data: Mapping[str, Any], key: str, what: str) -> list[Any]:
    value = data.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise BadReassignmentJson(f"{what}: \"{key}\" must be a JSON array")
    return value


def _duplicates(items: Iterable[Any]) -> list[Any]:
    seen: set[Any] = set()
    twice: list[Any] = []
    for item in items:
        if item in seen and item not in twice:
            twice.append(item)
        seen.add(item)
    return twice


def parse_topics_to_move(text: str) -> list[str]:
    """Topic names of a topics-to-move file, in file order."""
    what = "the topics-to-move JSON"
    data = _load(text, what)
    topics = []
    for entry in _list(data, "topics", what):
        if not isinstance(entry, dict) or not isinstance(entry.get("topic"), str):
            raise BadReassignmentJson(f"{what}: each entry of \"topics\" needs a \"topic\" string")
        topics.append(entry["topic"])
    if not topics:
        raise BadReassignmentJson(f"{what} names no topic")
    twice = _duplicates(topics)
    if twice:
        raise BadReassignmentJson(
            f"List of topics to reassign contains duplicate entries: {', '.join(twice)}"
        )
    return topics


def parse_broker_list(text: str) -> list[int]:
    """`--broker-list 1,2,3`."""
    brokers = []
    for part in text.split(","):
        try:
            brokers.append(int(part.strip()))
        except ValueError:
            raise BadReassignmentJson(
                f"--broker-list: {part.strip()!r} is not a broker id"
            ) from None
    twice = _duplicates(brokers)
    if twice:
        raise BadReassignmentJson(
            f"Broker list contains duplicate entries: {', '.join(map(str, twice))}"
        )
    return brokers


def parse_reassignment(text: str) -> dict[TopicPartition, list[int]]:
    """Partition -> target replicas of a reassignment file, in file order, checked as
    Kafka checks it before executing (no partition twice, no broker twice in one)."""
    what = "the reassignment JSON"
    data = _load(text, what)
    entries: list[tuple[TopicPartition, list[int]]] = []
    for entry in _list(data, "partitions", what):
        if not isinstance(entry, dict):
            raise BadReassignmentJson(f"{what}: each entry of \"partitions\" must be an object")
        topic, partition = entry.get("topic"), entry.get("partition")
        replicas = entry.get("replicas")
        if not isinstance(topic, str) or not topic:
            raise BadReassignmentJson(f"{what}: an entry has no \"topic\" string")
        if not _is_int(partition) or partition < 0:
            raise BadReassignmentJson(
                f"{what}: {topic}: \"partition\" must be a non-negative integer"
            )
        name = f"{topic}-{partition}"
        if not isinstance(replicas, list) or not all(_is_int(r) for r in replicas):
            raise BadReassignmentJson(f"{what}: {name}: \"replicas\" must be a list of broker ids")
        log_dirs = entry.get("log_dirs")
        if log_dirs is not None:
            if not isinstance(log_dirs, list) or not all(isinstance(d, str) for d in log_dirs):
                raise BadReassignmentJson(f"{what}: {name}: \"log_dirs\" must be a list of strings")
            if len(log_dirs) != len(replicas):
                raise BadReassignmentJson(
                    f"Size of replicas list {_java_list(replicas)} is different from size of "
                    f"log dirs list {_java_list(log_dirs)} for partition {name}"
                )
            other = [d for d in log_dirs if d != ANY_LOG_DIR]
            if other:
                raise BadReassignmentJson(
                    f"{name}: log dir {other[0]!r}: chronik has one data directory per "
                    "broker, so \"log_dirs\" may only say \"any\""
                )
        entries.append(((topic, partition), list(replicas)))
    if not entries:
        raise BadReassignmentJson("Partition reassignment list cannot be empty")
    if any(not replicas for _, replicas in entries):
        raise BadReassignmentJson("Partition replica list cannot be empty")
    twice = _duplicates(tp for tp, _ in entries)
    if twice:
        raise BadReassignmentJson(
            "Partition reassignment contains duplicate topic partitions: "
            + ",".join(f"{t}-{p}" for t, p in twice)
        )
    doubled = [(tp, _duplicates(replicas)) for tp, replicas in entries]
    doubled = [(tp, twice) for tp, twice in doubled if twice]
    if doubled:
        raise BadReassignmentJson(
            "Partition replica lists may not contain duplicate entries: "
            + ". ".join(
                f"{t}-{p} contains multiple entries for {','.join(map(str, twice))}"
                for (t, p), twice in doubled
            )
        )
    return dict(entries)


def _java_list(items: Sequence[Any]) -> str:
    return "[" + ", ".join(map(str, items)) + "]"


def format_reassignment(assignment: Mapping[TopicPartition, Sequence[int]]) -> str:
    """Kafka's formatAsReassignmentJson: compact, partitions in topic then index order."""
    partitions = [
        {
            "topic": topic,
            "partition": partition,
            "replicas": list(assignment[(topic, partition)]),
            "log_dirs": [ANY_LOG_DIR] * len(assignment[(topic, partition)]),
        }
        for topic, partition in sorted(assignment)
    ]
    return json.dumps({"version": VERSION, "partitions": partitions}, separators=(",", ":"),
                      ensure_ascii=False)


def partition_name(tp: TopicPartition) -> str:
    return f"{tp[0]}-{tp[1]}"


def throttled_replicas(
    moving: Mapping[TopicPartition, tuple[Iterable[int], Iterable[int]]],
) -> tuple[dict[str, str], dict[str, str], set[int]]:
    """Kafka's reassignment throttles from (sources, targets) per moving partition: per
    topic the `leader.replication.throttled.replicas` value (every source replica,
    `partition:broker`), the `follower.replication.throttled.replicas` value (every
    target replica that is not a source), and the brokers involved."""
    leaders: dict[str, set[tuple[int, int]]] = {}
    followers: dict[str, set[tuple[int, int]]] = {}
    brokers: set[int] = set()
    for (topic, partition), (sources, targets) in moving.items():
        source_set = set(sources)
        new = set(targets) - source_set
        leaders.setdefault(topic, set()).update((partition, b) for b in source_set)
        followers.setdefault(topic, set()).update((partition, b) for b in new)
        brokers |= source_set | new

    def text(pairs: set[tuple[int, int]]) -> str:
        # Kafka sorts the "p:b" strings as text (a TreeSet of strings).
        return ",".join(sorted(f"{p}:{b}" for p, b in pairs))

    return (
        {t: text(p) for t, p in leaders.items()},
        {t: text(p) for t, p in followers.items()},
        brokers,
    )
