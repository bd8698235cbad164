"""Checks of the idempotent producers' topic: no acknowledged record lost (on every
in-sync replica, at the offset its acknowledgement gave), no value twice within one
producer session, nothing written that was never sent or was refused, per-key order kept
within one producer instance; and the longest unavailability of each partition (the
longest time without a successful acknowledgement while the producers were sending).

Idempotence is a promise per producer session (producer id and epoch): the broker
drops a retry of a batch it holds. librdkafka starts a new epoch of its own when
requests time out in flight (KIP-360's epoch bump) and sends those records again with
new sequence numbers; a copy in another epoch is the client's, counted as
``duplicated_across_epochs`` and not an anomaly. The order check and the offset check
look at each value's first copy and at the copy at its acknowledged offset."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from .final_read import pkey, record_sessions, records
from .history import text
from .report import Report
from .saved_run import Run


@dataclass(frozen=True)
class Send:
    worker: str
    key: str
    partition: int
    gen: int
    seq: int
    time: float


def _seq(value: str) -> int:
    tail = value.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else -1


def check_producers(run: Run, report: Report) -> None:
    spec = run.topic("queue")
    if spec is None or run.final is None:
        return
    topic, partitions = spec
    sent: dict[str, Send] = {}
    outcome: dict[str, tuple[str, dict]] = {}
    acks: dict[int, list[float]] = defaultdict(list)
    windows: list[tuple[float, float]] = []
    for worker, events in run.workers("producer").items():
        first = last = None
        for e in events:
            if e.get("op") != "send":
                continue
            value = e["value"]
            if e["type"] == "invoke":
                sent[value] = Send(worker, e["key"], e["partition"], e.get("gen", 0),
                                   _seq(value), e["time"])
                first = e["time"] if first is None else first
                last = e["time"]
            elif e["type"] == "ok" or value not in outcome:
                outcome[value] = (e["type"], e)
                if e["type"] == "ok":
                    acks[e["partition"]].append(e["time"])
        if first is not None and last is not None:
            windows.append((first, last))

    acked = {v: e for v, (t, e) in outcome.items() if t == "ok"}
    failed = {v for v, (t, _) in outcome.items() if t == "fail"}
    unknown = {v for v in sent if v not in outcome or outcome[v][0] == "info"}
    lost: set[str] = set()
    duplicated: set[str] = set()
    across_epochs: set[str] = set()
    present_unknown: set[str] = set()

    for p in range(partitions):
        key = pkey(topic, p)
        info = run.final.partitions.get(key, {})
        hw = info.get("high_watermark")
        replicas = run.final.replicas.get(key, {})
        mine = {v: e for v, e in acked.items() if e["partition"] == p}
        for broker in info.get("isr", []):
            if broker not in replicas:
                continue
            where: dict[str, list[int]] = defaultdict(list)
            for r in records(replicas[broker], hw):
                where[text(r.value) or ""].append(r.offset)
            sessions = record_sessions(replicas[broker], hw)
            for value, offsets in where.items():
                if len(offsets) > 1:
                    by_session: dict[tuple[int, int], list[int]] = defaultdict(list)
                    for offset in offsets:
                        by_session[sessions.get(offset, (-1, -1))].append(offset)
                    twice = {s: o for s, o in by_session.items() if len(o) > 1}
                    if twice:
                        duplicated.add(value)
                        report.add("duplicate", f"{value!r} {len(offsets)} times in {key} on "
                                                f"broker {broker}, at offsets {offsets}, within "
                                                f"one producer session {sorted(twice)}")
                    else:
                        across_epochs.add(value)
                s = sent.get(value)
                if s is None:
                    report.add("unexpected", f"{key} on broker {broker} holds {value!r} at "
                                             f"offset {offsets[0]}, which no producer sent")
                    continue
                if s.partition != p:
                    report.add("partition", f"{value!r}, sent to partition {s.partition}, is in "
                                            f"{key} on broker {broker} at offset {offsets[0]}")
                if value in failed:
                    report.add("failed-written",
                               f"{value!r} was reported as failed "
                               f"({outcome[value][1].get('error')}) but {key} on broker "
                               f"{broker} holds it at offset {offsets[0]}")
                if value in unknown:
                    present_unknown.add(value)
            # librdkafka acknowledges without an offset (None) a message whose request
            # timed out once a later batch of its producer is acknowledged (it must then
            # have been written): its presence is checked, its offset cannot be.
            for value, e in sorted(mine.items(), key=lambda kv: (kv[1]["offset"] is not None,
                                                                   kv[1]["offset"] or 0)):
                offsets = where.get(value)
                if not offsets:
                    lost.add(value)
                    report.add("lost", f"acknowledged {value!r} ({key} offset {e['offset']}) is "
                                       f"missing on broker {broker} (high watermark {hw})")
                elif e["offset"] is not None and e["offset"] not in offsets:
                    report.add("offset", f"{value!r} was acknowledged at {key} offset "
                                         f"{e['offset']} but broker {broker} holds it at "
                                         f"{offsets[0]}")
        _check_order(run, report, topic, p, sent)

    report.figures.update({
        "sent": len(sent),
        "acknowledged": len(acked),
        "lost": len(lost),
        "duplicated": len(duplicated),
        "duplicated_across_epochs": len(across_epochs),
        "indeterminate": len(unknown),
        "indeterminate_written": len(present_unknown),
        "failed": len(failed),
    })
    report.figures["unavailability_s"] = unavailability(topic, partitions, acks, windows)
    if report.figures["unavailability_s"]:
        report.figures["longest_unavailability_s"] = max(
            report.figures["unavailability_s"].values())


def _check_order(run: Run, report: Report, topic: str, partition: int,
                 sent: dict[str, Send]) -> None:
    """Within one producer instance, a key's values are in the log in the order sent."""
    last: dict[tuple[str, int, str], tuple[int, str, int]] = {}
    seen: set[str] = set()
    for r in run.log(topic, partition):
        value = text(r.value) or ""
        s = sent.get(value)
        if s is None or value in seen:
            continue  # a later copy: sent again in a new producer epoch
        seen.add(value)
        stream = (s.worker, s.gen, s.key)
        before = last.get(stream)
        if before is not None and before[0] > s.seq:
            report.add("order", f"{pkey(topic, partition)}: key {s.key!r} of {s.worker}: "
                                f"{value!r} at offset {r.offset} comes after {before[1]!r} at "
                                f"offset {before[2]}, which was sent later")
        if before is None or s.seq > before[0]:
            last[stream] = (s.seq, value, r.offset)


def unavailability(topic: str, partitions: int, acks: dict[int, list[float]],
                   windows: list[tuple[float, float]]) -> dict[str, float]:
    """Per partition, the longest time with no successful acknowledgement while the
    producers were sending: from the first acknowledgement of any partition (before it
    the clients were still starting) to the last send of any producer, whose edges count
    as ends of a gap."""
    firsts = [min(ts) for ts in acks.values() if ts]
    if not windows or not firsts:
        return {}
    start = min(firsts)
    end = max(start, max(w[1] for w in windows))
    out: dict[str, float] = {}
    for p in range(partitions):
        points = [start, *sorted(t for t in acks.get(p, []) if start <= t <= end), end]
        out[pkey(topic, p)] = round(max(b - a for a, b in zip(points, points[1:], strict=False)), 3)
    return out
