"""Checks of the event-store topic (key.versioning.enable=true): per key, the versions the
broker stamped (``chronik-version``) run 0, 1, 2, ... in offset order, without gap or
repeat, each record's version equal to the ``chronik-expected-version`` it carried; each
acknowledged append is in the log at its offset with the version it expected, no version
of a key acknowledged to two writers; no refused append written; no value twice."""

from __future__ import annotations

from collections import defaultdict

from .final_read import pkey
from .history import text
from .report import Report
from .saved_run import Run

VERSION_HEADER = "chronik-version"
EXPECTED_HEADER = "chronik-expected-version"


def _header(headers: tuple[tuple[str, bytes | None], ...], name: str) -> int | None:
    for k, v in headers:
        if k == name and v is not None and v.isdigit():
            return int(v)
    return None


def check_events(run: Run, report: Report) -> None:
    spec = run.topic("events")
    if spec is None or run.final is None:
        return
    topic, partitions = spec
    invoked: dict[str, dict] = {}
    outcome: dict[str, dict] = {}
    for events in run.workers("eventstore").values():
        for e in events:
            if e.get("op") != "append":
                continue
            if e["type"] == "invoke":
                invoked[e["value"]] = e
            elif e["type"] == "ok" or e["value"] not in outcome:
                outcome[e["value"]] = e

    # What the log holds: value -> [(partition, offset, key, version)].
    held: dict[str, list[tuple[int, int, str | None, int | None]]] = defaultdict(list)
    key_partitions: dict[str | None, set[int]] = defaultdict(set)
    for p in range(partitions):
        per_key: dict[str | None, list[tuple[int, int | None, str]]] = defaultdict(list)
        for r in run.log(topic, p):
            key, value = text(r.key), text(r.value) or ""
            version = _header(r.headers, VERSION_HEADER)
            expected = _header(r.headers, EXPECTED_HEADER)
            held[value].append((p, r.offset, key, version))
            key_partitions[key].add(p)
            per_key[key].append((r.offset, version, value))
            where = f"{pkey(topic, p)} offset {r.offset}"
            if version is None:
                report.add("version", f"{value!r} at {where} has no {VERSION_HEADER} header")
            elif expected is not None and expected != version:
                report.add("version", f"{value!r} at {where} expected version {expected} but "
                                      f"was stamped {version}")
            if value not in invoked:
                report.add("unexpected", f"{where} holds {value!r}, which no writer appended")
        for key, rows in per_key.items():
            versions = [v for _, v, _ in rows]
            if versions != list(range(len(versions))):
                report.add("version-sequence",
                           f"key {key!r} in {pkey(topic, p)}: versions in offset order are "
                           f"{_first_break(rows)}")
    for key, ps in key_partitions.items():
        if len(ps) > 1:
            report.add("version", f"key {key!r} has records in partitions {sorted(ps)}")

    won: dict[tuple[str, int], list[str]] = defaultdict(list)
    figures = {"appends": len(invoked), "won": 0, "conflicts": 0, "refused_other": 0,
               "indeterminate": 0, "indeterminate_written": 0}
    for value, inv in invoked.items():
        e = outcome.get(value)
        copies = held.get(value, [])
        if len(copies) > 1:
            report.add("duplicate", f"{value!r} is in the log {len(copies)} times: "
                                    f"{[(pkey(topic, p), o) for p, o, _, _ in copies]}")
        if e is None or e["type"] == "info":
            figures["indeterminate"] += 1
            figures["indeterminate_written"] += bool(copies)
        elif e["type"] == "fail":
            if e.get("actual") is not None:
                figures["conflicts"] += 1
                if e["actual"] == inv["expected"]:
                    report.add("conflict", f"{e['worker']}'s append of {value!r} expecting "
                                           f"version {inv['expected']} of {inv['key']!r} was "
                                           f"refused naming that same version as actual")
            else:
                figures["refused_other"] += 1
            if copies:
                report.add("failed-written", f"{value!r} ({inv['key']!r} expecting version "
                                             f"{inv['expected']}) was refused ({e.get('error')}) "
                                             f"but the log holds it at {copies[0][:2]}")
        else:
            figures["won"] += 1
            won[(inv["key"], inv["expected"])].append(value)
            at = (e["partition"], e["offset"])
            match = [c for c in copies if (c[0], c[1]) == at]
            if not match:
                found = f"at {[c[:2] for c in copies]}" if copies else "nowhere"
                report.add("lost", f"acknowledged append {value!r} ({inv['key']!r} version "
                                   f"{inv['expected']}, {pkey(topic, at[0])} offset {at[1]}) "
                                   f"is {found} in the final log")
            elif match[0][3] != inv["expected"]:
                report.add("version", f"acknowledged append {value!r} expected version "
                                      f"{inv['expected']} of {inv['key']!r}, the log has it as "
                                      f"version {match[0][3]}")
    for (key, version), values in won.items():
        if len(values) > 1:
            report.add("version-double-win", f"version {version} of {key!r} was acknowledged to "
                                             f"{len(values)} appends: {values}")
    report.figures["eventstore"] = figures


def _first_break(rows: list[tuple[int, int | None, str]]) -> str:
    """Where a key's versions first leave 0, 1, 2, ...; for an anomaly's message."""
    for i, (offset, version, value) in enumerate(rows):
        if version != i:
            before = f" after version {rows[i - 1][1]} at offset {rows[i - 1][0]}" if i else ""
            return (f"not 0, 1, 2, ...: {version} at offset {offset} ({value!r}) is record "
                    f"number {i} of the key{before}")
    return "in order"
