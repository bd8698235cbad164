"""Checks of a consumer group: every record a member read is the one the final log holds
at that offset; a group's committed offset of a partition never goes backwards (in the
order commits were acknowledged, in the poller's samples, and at the end); and every
record below the final committed offset was read by some member (at least once). A
poll sent after a commit was acknowledged answering an older offset is a stale read of
the coordinator (``stale-offset``); the end below an acknowledged commit, a lost one.

A commit that timed out (``info``) may still land later and move an offset back to
what it carried: such a step back is a note, not an anomaly."""

from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass
from typing import NamedTuple

from .final_read import pkey
from .history import Event, text
from .report import Report
from .saved_run import Run


@dataclass(frozen=True)
class Commit:
    worker: str
    invoked: float
    time: float
    offset: int


def check_group(run: Run, report: Report, role: str, readable: dict[int, dict[int, str]]) -> None:
    """``role``: the group's role in run.json; ``readable``: partition -> offset -> value
    of what a member of this group can be served (the final log, or for read_committed
    readers what a read_committed consumer gets at the end)."""
    group, spec = run.group(role), run.topic(role)
    if group is None or spec is None or run.final is None:
        return
    topic, partitions = spec
    members = run.consumers_of(group)
    logs = {p: {r.offset: (text(r.key), text(r.value)) for r in run.log(topic, p)}
            for p in range(partitions)}
    read: dict[int, set[tuple[int, str | None]]] = defaultdict(set)
    acked: dict[int, list[Commit]] = defaultdict(list)
    unsure: dict[int, set[int]] = defaultdict(set)
    figures = {"reads": 0, "commits": 0, "commits_failed": 0, "commits_indeterminate": 0,
               "restarts": 0}

    for worker, events in members.items():
        starts = 0
        invoked_offsets: dict[float, dict[str, int]] = {}
        answered: set[float] = set()
        for e in events:
            op, type_ = e.get("op"), e.get("type")
            if op == "start":
                starts += 1
            elif op == "read" and type_ == "ok":
                for p, offset, key, value in e["records"]:
                    figures["reads"] += 1
                    read[p].add((offset, value))
                    _check_read(report, topic, worker, e, p, offset, key, value, logs)
            elif op == "commit":
                _commit_event(e, worker, invoked_offsets, answered, acked, unsure, figures)
        # A commit without an answer (killed meanwhile) may have landed too.
        for t, offsets in invoked_offsets.items():
            if t not in answered:
                for p, offset in offsets.items():
                    unsure[int(p)].add(offset)
        figures["restarts"] += max(starts - 1, 0)

    for p, commits in acked.items():
        _check_acked_order(report, group, pkey(topic, p), commits, unsure[p])
    samples = _poller_samples(run, group, topic)
    for p, series in samples.items():
        _check_series(report, group, pkey(topic, p), series, acked.get(p, []), unsure[p])
    final = run.final.committed(group)
    for p in range(partitions):
        key = pkey(topic, p)
        committed = final.get(key)
        highest = max(acked.get(p, []), key=lambda c: c.offset, default=None)
        if highest is not None and (committed is None or committed < highest.offset):
            message = (f"group {group}, {key}: committed offset {committed} at the end, below "
                       f"{highest.offset} whose commit {highest.worker} had acknowledged at "
                       f"{highest.time:.3f}")
            if committed is not None and committed in unsure[p]:
                report.notes.append(message + " (a commit of that offset timed out)")
            else:
                report.add("commit-lost", message)
        if committed is None:
            continue
        hw = run.final.partitions.get(key, {}).get("high_watermark")
        if hw is not None and committed > hw:
            report.add("commit-beyond-end", f"group {group}, {key}: committed offset {committed} "
                                            f"is past the log's end {hw}")
        skipped = sorted(o for o, v in readable.get(p, {}).items()
                         if o < committed and (o, v) not in read[p])
        if skipped:
            report.add("skipped", f"group {group}, {key}: committed up to {committed}, but no "
                                  f"member read the {len(skipped)} records at offsets "
                                  f"{_ranges(skipped)}")
    figures["unread"] = sum(1 for p, rows in readable.items() for o, v in rows.items()
                            if (o, v) not in read[p])
    report.figures[f"group_{role}"] = {**figures, "members": len(members),
                                        "poller_samples": sum(len(s) for s in samples.values())}


def _check_read(report: Report, topic: str, worker: str, e: Event, p: int, offset: int,
                key: str | None, value: str | None,
                logs: dict[int, dict[int, tuple[str | None, str | None]]]) -> None:
    stored = logs.get(p, {}).get(offset)
    if stored == (key, value):
        return
    held = "nothing" if stored is None else f"key {stored[0]!r} value {stored[1]!r}"
    report.add("read", f"{worker} read key {key!r} value {value!r} at {pkey(topic, p)} offset "
                       f"{offset} (at {e['time']:.3f}); the final log holds {held} there")


def _commit_event(e: Event, worker: str, invoked_offsets: dict[float, dict[str, int]],
                  answered: set[float], acked: dict[int, list[Commit]],
                  unsure: dict[int, set[int]], figures: dict[str, int]) -> None:
    type_ = e.get("type")
    if type_ == "invoke":
        invoked_offsets[e["time"]] = e["offsets"]
        return
    if type_ == "ok":
        answered.add(e.get("invoked", -1.0))
        figures["commits"] += 1
        for p, offset in e["offsets"].items():
            acked[int(p)].append(Commit(worker, e.get("invoked", e["time"]), e["time"], offset))
        return
    if "invoked" in e:
        answered.add(e["invoked"])
    elif invoked_offsets:
        # The invoke just before this outcome is the one it answers.
        answered.add(max(t for t in invoked_offsets if t <= e["time"]))
    if type_ == "info":
        figures["commits_indeterminate"] += 1
        for p, offset in e["offsets"].items():
            unsure[int(p)].add(offset)
    else:
        figures["commits_failed"] += 1


def _check_acked_order(report: Report, group: str, key: str, commits: list[Commit],
                       unsure: set[int]) -> None:
    """A commit invoked after another was acknowledged carries no lower offset."""
    by_done = sorted(commits, key=lambda c: c.time)
    done_times = [c.time for c in by_done]
    best = _running_max(by_done)
    for c in commits:
        i = bisect.bisect_left(done_times, c.invoked)
        if i and best[i - 1].offset > c.offset:
            before = best[i - 1]
            message = (f"group {group}, {key}: {c.worker} committed {c.offset} (invoked "
                       f"{c.invoked:.3f}) after {before.worker}'s commit of {before.offset} was "
                       f"acknowledged at {before.time:.3f}")
            # A timed-out commit landing late may have set the offset back below c's.
            if any(u <= c.offset for u in unsure):
                report.notes.append(message + " (a commit that timed out may explain it)")
            else:
                report.add("commit-backwards", message)


class Sample(NamedTuple):
    """One poll of the group's committed offset of a partition."""

    started: float
    answered: float
    offset: int
    coordinator: int | None


def _poller_samples(run: Run, group: str, topic: str) -> dict[int, list[Sample]]:
    """partition -> its samples, in the order they were asked for."""
    out: dict[int, list[Sample]] = defaultdict(list)
    for events in run.workers("poller").values():
        for e in events:
            if e.get("op") == "committed" and e.get("type") == "ok" and e.get("group") == group:
                for key, offset in e["offsets"].items():
                    t, _, p = key.rpartition("/")
                    if t == topic:
                        out[int(p)].append(Sample(e.get("started", e["time"]), e["time"], offset,
                                                  e.get("coordinator")))
    for series in out.values():
        series.sort()
    return out


def _check_series(report: Report, group: str, key: str, series: list[Sample],
                  acked: list[Commit], unsure: set[int]) -> None:
    peak: Sample | None = None
    for s in series:
        if peak is not None and s.offset < peak.offset:
            message = (f"group {group}, {key}: the committed offset went from {peak.offset} "
                       f"({_by(peak)}at {peak.answered:.3f}) back to {s.offset} "
                       f"({_by(s)}at {s.answered:.3f})")
            if s.offset in unsure:
                report.notes.append(message + " (a commit of that offset timed out)")
            else:
                report.add("commit-backwards", message)
        if peak is None or s.offset >= peak.offset:
            peak = s
    # A sample asked for after a commit was acknowledged shows at least that commit.
    done = sorted(acked, key=lambda c: c.time)
    done_times = [c.time for c in done]
    best = _running_max(done)
    for s in series:
        i = bisect.bisect_left(done_times, s.started)
        if not i or s.offset >= best[i - 1].offset:
            continue
        top = best[i - 1]
        message = (f"group {group}, {key}: {top.worker}'s commit of {top.offset} was "
                   f"acknowledged at {top.time:.3f}, but the coordinator ({_by(s)}asked at "
                   f"{s.started:.3f}) answered {s.offset}")
        if s.offset in unsure:
            report.notes.append(message + " (a commit of that offset timed out)")
        else:
            report.add("stale-offset", message)


def _by(s: Sample) -> str:
    return "" if s.coordinator is None else f"broker {s.coordinator} "


def _running_max(done: list[Commit]) -> list[Commit]:
    """For each prefix of ``done``, its commit of the highest offset."""
    best: list[Commit] = []
    for c in done:
        best.append(c if not best or c.offset >= best[-1].offset else best[-1])
    return best


def _ranges(offsets: list[int], limit: int = 10) -> str:
    spans: list[str] = []
    start = prev = offsets[0]
    for o in offsets[1:] + [None]:  # type: ignore[list-item]
        if o is not None and o == prev + 1:
            prev = o
            continue
        spans.append(f"{start}" if start == prev else f"{start}-{prev}")
        if o is not None:
            start = prev = o
    shown = ", ".join(spans[:limit])
    return shown + (f", ... ({len(spans) - limit} more ranges)" if len(spans) > limit else "")
