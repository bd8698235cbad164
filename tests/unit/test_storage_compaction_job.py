"""Compaction in two steps: rewriting off the log's thread, installing on it."""

from __future__ import annotations

import threading

from test_storage_compaction import compact_config, keyed
from test_storage_support import NOW, all_records, append, open_log


def test_job_runs_on_another_thread_while_appends_go_on(tmp_path):
    log = open_log(tmp_path / "t-0", compact_config())
    for i in range(60):
        append(log, keyed(b"k%d" % (i % 3), b"v%d" % i))
    job = log.compaction_job(NOW)
    assert job is not None
    worker = threading.Thread(target=job.run)
    worker.start()
    worker.join()
    append(log, keyed(b"late", b"after the run"))  # the log kept serving
    saved = job.install()
    assert saved > 0
    records = all_records(log)
    assert records[-1].value == b"after the run"
    log.close()
    assert all_records(open_log(log.directory, compact_config())) == records


def test_segments_dropped_before_install_are_not_resurrected(tmp_path):
    log = open_log(tmp_path / "t-0", compact_config())
    for i in range(60):
        append(log, keyed(b"k%d" % (i % 3), b"v%d" % i))
    job = log.compaction_job(NOW).run()
    assert job.swapped
    first = job.swapped[0]
    cut = log.segments[1].base_offset
    log.delete_records(cut)
    log.apply_retention(NOW)
    assert first not in log.segments
    job.install()
    assert not list(log.directory.glob("*.swap"))
    start = log.start_offset
    log.close()
    again = open_log(log.directory, compact_config())
    assert again.start_offset == start
    assert all(r.offset >= start for r in all_records(again))
