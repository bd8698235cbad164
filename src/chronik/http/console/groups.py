"""The console's consumer groups: the paged list (ListGroups from every broker, then for
the page's groups only FindCoordinator, DescribeGroups and OffsetFetch at their
coordinators and ListOffsets LATEST at the leaders, for members and lag), one group's
members, assignments, committed offsets and lag, an offset reset with the rules of
``chronik groups reset-offsets`` (the group must have no active member, 409
NON_EMPTY_GROUP otherwise; an offset outside the log clamped to its nearest end; a
timestamp past the last record goes to the end), and DeleteGroups.

A member's assignment is the consumer protocol's (Kafka's ConsumerProtocolAssignment:
int16 version, [string topic, [int32 partition]], bytes user data); other protocols'
assignments are shown as none.
"""

from __future__ import annotations

import asyncio
import struct
from typing import Any

from kio.schema.errors import ErrorCode

from chronik.http.console.kafka import (
    DELETE_GROUPS,
    DESCRIBE_GROUPS,
    EARLIEST,
    LATEST,
    LIST_GROUPS,
    OFFSET_COMMIT,
    OFFSET_FETCH,
    KafkaError,
    KafkaSession,
    check,
    entity,
    leaders,
)
from chronik.http.console.params import field_of, page
from chronik.http.server import HttpError

INACTIVE = ("Empty", "Dead")
RESET_TO = ("earliest", "latest", "offset", "timestamp", "shift")
MAX_RESET_PARTITIONS = 100_000


async def list_groups(kafka: KafkaSession, query: dict[str, str]) -> dict[str, Any]:
    meta = await kafka.brokers()

    async def listed(node: int) -> list[Any]:
        response = await kafka.send(LIST_GROUPS, node, states_filter=())
        if int(response.error_code):
            # A broker still loading its groups: the others' are shown.
            return []
        return list(response.groups)

    answers = await asyncio.gather(*(listed(int(b.node_id)) for b in meta.brokers))
    groups: dict[str, Any] = {}
    for answer in answers:
        for g in answer:
            groups[g.group_id] = g
    total, chosen = page(query, list(groups.values()), lambda g: str(g.group_id))
    ids = [g.group_id for g in chosen]
    described, lags = await asyncio.gather(describe_many(kafka, ids), lags_of(kafka, ids))
    items = []
    for g in chosen:
        d = described.get(g.group_id)
        items.append(
            {
                "group_id": g.group_id,
                "state": d.group_state if d is not None else g.group_state,
                "protocol_type": g.protocol_type,
                "members": len(d.members) if d is not None else None,
                "lag": lags.get(g.group_id),
            }
        )
    return {"total": total, "items": items}


async def describe_many(kafka: KafkaSession, ids: list[str]) -> dict[str, Any]:
    """DescribeGroups of ``ids`` at their coordinators; groups that fail are left out."""
    if not ids:
        return {}
    try:
        nodes = await kafka.coordinators(ids)
    except KafkaError:
        nodes = {}
        for g in ids:
            try:
                nodes.update(await kafka.coordinators([g]))
            except KafkaError:
                continue
    by_node: dict[int, list[str]] = {}
    for g, node in nodes.items():
        by_node.setdefault(node, []).append(g)

    async def ask(node: int, names: list[str]) -> list[Any]:
        try:
            response = await kafka.send(DESCRIBE_GROUPS, node, groups=tuple(names),
                                        include_authorized_operations=False)
        except HttpError:
            return []
        return [d for d in response.groups if not int(d.error_code)]

    out: dict[str, Any] = {}
    for answer in await asyncio.gather(*(ask(n, names) for n, names in by_node.items())):
        for d in answer:
            out[d.group_id] = d
    return out


async def committed(
    kafka: KafkaSession, node: int, ids: list[str]
) -> dict[str, dict[tuple[str, int], int]]:
    """The committed offsets of groups at one coordinator (OffsetFetch v8, one request)."""
    groups = tuple(entity(OFFSET_FETCH, "OffsetFetchRequestGroup", group_id=g, topics=None)
                   for g in ids)
    response = await kafka.send(OFFSET_FETCH, node, groups=groups, require_stable=False)
    out: dict[str, dict[tuple[str, int], int]] = {}
    for group in response.groups:
        if int(group.error_code):
            if len(ids) == 1:
                check(group.error_code, None, f"offsets of group {group.group_id!r}")
            continue
        offsets = out.setdefault(group.group_id, {})
        for topic in group.topics:
            for p in topic.partitions:
                if not int(p.error_code) and int(p.committed_offset) >= 0:
                    offsets[(topic.name, int(p.partition_index))] = int(p.committed_offset)
    return out


async def lags_of(kafka: KafkaSession, ids: list[str]) -> dict[str, int | None]:
    """The total lag of each group (None for one without committed offsets or whose
    offsets cannot be read)."""
    if not ids:
        return {}
    try:
        nodes = await kafka.coordinators(ids)
    except KafkaError:
        return {}
    by_node: dict[int, list[str]] = {}
    for g, node in nodes.items():
        by_node.setdefault(node, []).append(g)

    async def ask(node: int, names: list[str]) -> dict[str, dict[tuple[str, int], int]]:
        try:
            return await committed(kafka, node, names)
        except HttpError:
            return {}

    offsets: dict[str, dict[tuple[str, int], int]] = {}
    for answer in await asyncio.gather(*(ask(n, names) for n, names in by_node.items())):
        offsets.update(answer)
    wanted = {tp for o in offsets.values() for tp in o}
    ends = await _ends(kafka, wanted)
    out: dict[str, int | None] = {}
    for g in ids:
        own = offsets.get(g)
        if not own:
            out[g] = None
            continue
        out[g] = sum(max(0, ends[tp] - c) for tp, c in own.items() if tp in ends)
    return out


async def _ends(kafka: KafkaSession, wanted: set[tuple[str, int]]) -> dict[tuple[str, int], int]:
    if not wanted:
        return {}
    led = await kafka.leaders_of({t for t, _ in wanted})
    return await kafka.list_offsets({k: v for k, v in led.items() if k in wanted}, LATEST)


def assignment_of(data: bytes) -> list[dict[str, Any]]:
    """The partitions of a consumer protocol assignment; none when it does not parse."""
    out: list[dict[str, Any]] = []
    try:
        pos = 2  # version
        (count,) = struct.unpack_from(">i", data, pos)
        pos += 4
        for _ in range(max(0, count)):
            (length,) = struct.unpack_from(">h", data, pos)
            pos += 2
            topic = bytes(data[pos : pos + length]).decode("utf-8")
            pos += length
            (n,) = struct.unpack_from(">i", data, pos)
            pos += 4
            for _ in range(max(0, n)):
                (p,) = struct.unpack_from(">i", data, pos)
                pos += 4
                out.append({"topic": topic, "partition": p})
    except (struct.error, UnicodeDecodeError):
        return []
    return sorted(out, key=lambda a: (a["topic"], a["partition"]))


async def _describe_one(kafka: KafkaSession, group_id: str) -> tuple[int, Any]:
    node = await kafka.node_of_coordinator(group_id)
    response = await kafka.send(DESCRIBE_GROUPS, node, groups=(group_id,),
                                include_authorized_operations=False)
    described = response.groups[0]
    check(described.error_code, None, f"group {group_id!r}")
    return node, described


async def describe_group(kafka: KafkaSession, group_id: str) -> dict[str, Any]:
    node, d = await _describe_one(kafka, group_id)
    offsets = (await committed(kafka, node, [group_id])).get(group_id, {})
    if d.group_state == "Dead" and not offsets:
        raise KafkaError(int(ErrorCode.group_id_not_found), None, f"group {group_id!r}")
    members = []
    owners: dict[tuple[str, int], str] = {}
    for m in d.members:
        assigned = assignment_of(m.member_assignment) if d.protocol_type == "consumer" else []
        for a in assigned:
            owners[(a["topic"], a["partition"])] = m.member_id
        members.append(
            {
                "member_id": m.member_id,
                "client_id": m.client_id,
                "host": m.client_host,
                "assignment": assigned,
            }
        )
    keys = sorted(set(offsets) | set(owners))
    ends = await _ends(kafka, set(keys))
    rows = []
    total = 0
    for key in keys:
        current = offsets.get(key)
        end = ends.get(key)
        lag = end - current if current is not None and end is not None else None
        if lag is not None:
            total += max(0, lag)
        rows.append(
            {
                "topic": key[0],
                "partition": key[1],
                "committed": current,
                "log_end_offset": end,
                "lag": lag,
                "member_id": owners.get(key),
            }
        )
    return {
        "group_id": group_id,
        "state": d.group_state,
        "protocol": d.protocol_data,
        "protocol_type": d.protocol_type,
        "coordinator": node,
        "members": members,
        "offsets": rows,
        "total_lag": total,
    }


async def reset_offsets(kafka: KafkaSession, group_id: str, doc: dict[str, Any]) -> dict[str, Any]:
    topic = field_of(doc, "topic", str)
    chosen = field_of(doc, "partitions", list, None)
    to = field_of(doc, "to", str)
    if to not in RESET_TO:
        raise HttpError(400, "bad_request", f"to must be one of {', '.join(RESET_TO)}")
    value = field_of(doc, "value", int, None)
    if to in ("offset", "timestamp", "shift") and value is None:
        raise HttpError(400, "bad_request", f"to={to} needs a value")
    dry_run = field_of(doc, "dry_run", bool, False)
    node, d = await _describe_one(kafka, group_id)
    if d.group_state not in INACTIVE:
        raise HttpError(
            409,
            "NON_EMPTY_GROUP",
            f"cannot reset offsets of group {group_id!r}: it is {d.group_state} with "
            f"{len(d.members)} active member(s); stop its consumers first",
        )
    meta = await kafka.topic_metadata(topic)
    existing = sorted(int(p.partition_index) for p in meta.partitions)
    if chosen is None:
        wanted = existing
    else:
        if not all(isinstance(p, int) and not isinstance(p, bool) for p in chosen):
            raise HttpError(400, "bad_request", "partitions must be a list of integers")
        unknown = [p for p in chosen if p not in existing]
        if unknown:
            raise HttpError(404, "UNKNOWN_TOPIC_OR_PARTITION",
                            f"topic {topic!r} has no partition {unknown[0]}")
        wanted = sorted(set(chosen))
    if not wanted or len(wanted) > MAX_RESET_PARTITIONS:
        raise HttpError(400, "bad_request", "no partitions to reset")
    led = {k: v for k, v in leaders(meta).items() if k[1] in wanted}
    current = (await committed(kafka, node, [group_id])).get(group_id, {})
    earliest, latest = await asyncio.gather(kafka.list_offsets(led, EARLIEST),
                                            kafka.list_offsets(led, LATEST))
    at: dict[tuple[str, int], int] = {}
    if to == "timestamp":
        assert value is not None
        at = await kafka.list_offsets(led, dict.fromkeys(led, value))
    plan = []
    for index in wanted:
        key = (topic, index)
        if key not in earliest or key not in latest:
            raise HttpError(503, "LEADER_NOT_AVAILABLE",
                            f"the offsets of {topic}-{index} cannot be read now")
        low, high = earliest[key], latest[key]
        if to == "earliest":
            new = low
        elif to == "latest":
            new = high
        elif to == "offset":
            assert value is not None
            new = min(max(value, low), high)
        elif to == "timestamp":
            found = at.get(key, -1)
            new = high if found < 0 else found
        else:
            if key not in current:
                raise HttpError(400, "bad_request",
                                f"cannot shift the offset of {topic}-{index}: the group has "
                                "no committed offset there")
            assert value is not None
            new = min(max(current[key] + value, low), high)
        plan.append({"topic": topic, "partition": index, "from": current.get(key), "to": new})
    if dry_run:
        return {"offsets": plan, "applied": False}
    partitions = tuple(
        entity(OFFSET_COMMIT, "OffsetCommitRequestPartition", partition_index=row["partition"],
               committed_offset=row["to"], committed_leader_epoch=-1, committed_metadata="")
        for row in plan
    )
    response = await kafka.send(
        OFFSET_COMMIT, node, group_id=group_id, generation_id_or_member_epoch=-1, member_id="",
        group_instance_id=None,
        topics=(entity(OFFSET_COMMIT, "OffsetCommitRequestTopic", name=topic,
                       partitions=partitions),),
    )
    for t in response.topics:
        for p in t.partitions:
            check(p.error_code, None, f"cannot reset offset of {t.name}-{p.partition_index}")
    return {"offsets": plan, "applied": True}


async def delete_group(kafka: KafkaSession, group_id: str) -> dict[str, Any]:
    node = await kafka.node_of_coordinator(group_id)
    response = await kafka.send(DELETE_GROUPS, node, groups_names=(group_id,))
    for result in response.results:
        check(result.error_code, None, f"cannot delete group {group_id!r}")
    return {"deleted": group_id}
