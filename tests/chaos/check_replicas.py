"""Checks of the final read itself: every partition back to its full ISR, each in-sync
replica a gapless run of batches reaching the high watermark, all of them byte for byte
the same below it (batches compared, not segment files: roll points are each broker's
own), and what the leaders serve over Kafka equal to what their files hold.

The replicas are the assignment at the end: after a reassignment, those it removed are
not expected anywhere; a reassignment still in progress once everything healed, and a
broker still holding a copy of a partition it is no longer assigned, are anomalies: at
the end (the final read's ``orphans``), or while a reassignment fault held a replica
off a broker that was up (the harness's ``event stale-copy``, chaos.faults.Reassign)."""

from __future__ import annotations

from collections import defaultdict

from chronik.records.batch import BatchHeader

from .final_read import batches, split_pkey
from .history import text
from .report import Report
from .saved_run import Run


def _describe(h: BatchHeader) -> str:
    return (f"batch {h.base_offset}-{h.last_offset} (leader epoch {h.partition_leader_epoch}, "
            f"producer {h.producer_id}/{h.producer_epoch} seq {h.base_sequence}, "
            f"{h.records_count} records, crc {h.crc:#010x})")


def check_replicas(run: Run, report: Report) -> None:
    final = run.final
    if final is None:
        report.add("final-read", "no final read was taken (final/state.json missing)")
        return
    for error in final.state.get("errors", []):
        report.add("final-read", error)
    compared = 0
    for key, info in sorted(final.partitions.items()):
        replicas = final.replicas.get(key, {})
        if info.get("adding") or info.get("removing"):
            report.add("reassignment", f"{key}: still being reassigned after healing (replicas "
                                       f"{info.get('replicas')}, adding {info.get('adding')}, "
                                       f"removing {info.get('removing')})")
        for broker in info.get("orphans", []):
            report.add("replica-orphan", f"{key}: broker {broker} still holds a copy, though "
                                         f"the partition's replicas are {info.get('replicas')}")
        if not info.get("full_isr"):
            report.add("isr", f"{key}: after healing the ISR was {info.get('isr')} of replicas "
                              f"{info.get('replicas')} (leader {info.get('leader')})")
        hw = info.get("high_watermark")
        if hw is None:
            report.add("final-read", f"{key}: the leader gave no high watermark")
            continue
        below: dict[int, list[tuple[BatchHeader, bytes]]] = {}
        for broker in info.get("isr", []):
            if broker not in replicas:
                report.add("final-read", f"{key}: no replica file from broker {broker}")
                continue
            all_batches = batches(replicas[broker])
            end = None
            for h, _ in all_batches:
                if end is not None and h.base_offset != end:
                    report.add("replica-gap",
                               f"{key} on broker {broker}: {_describe(h)} follows a batch "
                               f"ending at offset {end - 1}")
                    break
                end = h.last_offset + 1
            end = end or 0
            if end < hw:
                report.add("replica-short",
                           f"{key} on broker {broker} (in the ISR) ends at offset {end}, below "
                           f"the high watermark {hw}")
            below[broker] = [(h, d) for h, d in all_batches if h.base_offset < hw]
        if len(below) < 2:
            continue
        reference = info.get("leader") if info.get("leader") in below else min(below)
        expected = below[reference]
        for broker, got in sorted(below.items()):
            if broker == reference:
                continue
            compared += 1
            if [d for _, d in got] == [d for _, d in expected]:
                continue
            for (ha, da), (hb, db) in zip(expected, got, strict=False):
                if da != db:
                    report.add("replica-divergence",
                               f"{key}: below the high watermark {hw}, broker {broker} holds "
                               f"{_describe(hb)} where broker {reference} holds {_describe(ha)}")
                    break
            else:
                report.add("replica-divergence",
                           f"{key}: below the high watermark {hw}, broker {broker} holds "
                           f"{len(got)} batches, broker {reference} {len(expected)}")
    report.figures["replica_pairs_compared"] = compared
    for e in run.histories.get("harness", []):
        if e.get("op") == "stale-copy":
            report.add("replica-orphan", f"{e.get('partition')}: broker {e.get('broker')} "
                                         f"still held a copy {e.get('waited')}s after a "
                                         f"reassignment had removed its replica")
    _check_fetched(run, report)


def _check_fetched(run: Run, report: Report) -> None:
    """A read_uncommitted consumer's records against the leaders' files below the high
    watermark: same offsets, keys and values."""
    assert run.final is not None
    for topic, isolation in sorted(run.final.fetched):
        if isolation != "read_uncommitted":
            continue
        got: dict[int, list[tuple[int, str | None, str | None]]] = defaultdict(list)
        for r in run.final.rows(topic, isolation):
            got[r.partition].append((r.offset, r.key, r.value))
        for key in sorted(run.final.partitions):
            t, p = split_pkey(key)
            if t != topic:
                continue
            stored = [(r.offset, text(r.key), text(r.value)) for r in run.log(t, p)]
            fetched = got.get(p, [])
            if fetched == stored:
                continue
            for a, b in zip(stored, fetched, strict=False):
                if a != b:
                    report.add("fetch", f"{key}: the leader served offset {b[0]} key {b[1]!r} "
                                        f"value {b[2]!r}; its file holds offset {a[0]} key "
                                        f"{a[1]!r} value {a[2]!r}")
                    break
            else:
                report.add("fetch", f"{key}: a consumer got {len(fetched)} records, the "
                                    f"leader's file holds {len(stored)} below the high watermark")
