"""The compiled batch decoder and the Fetch wire code agree with the reference implementations:
records.reader for batches, kio for the Fetch request and response."""

from __future__ import annotations

import datetime
import struct

import pytest

pytest.importorskip("numba")
pytest.importorskip("pyspark")

import numpy as np  # noqa: E402
from crc32c import crc32c  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from kio.index import load_request_schema  # noqa: E402
from kio.serial import entity_reader  # noqa: E402
from test_records_codec import records_st  # noqa: E402

from chronik.protocol.fetch_response import (  # noqa: E402
    PartitionResult,
    TopicResult,
    encode_fetch_response,
)
from chronik.records.builder import Record, build_batch  # noqa: E402
from chronik.records.reader import iter_records  # noqa: E402
from chronik.spark import record_decode  # noqa: E402
from chronik.spark.fetch_client import decode_fetch, encode_fetch  # noqa: E402
from chronik.spark.fetch_read import CorruptRecords, _PartitionReader  # noqa: E402

batch_specs = st.lists(
    st.tuples(
        records_st,
        st.sampled_from([0, 1, 2, 3, 4]),  # codec
        st.one_of(st.none(), st.integers(0, 2**41)),  # LogAppendTime
        st.booleans(),  # offset gaps, as compaction leaves them
        st.integers(0, 3),  # gap before the batch
        st.integers(0, 9),  # 0: a control batch
    ),
    min_size=1,
    max_size=6,
)


def _build(specs) -> tuple[bytes, list[tuple[int, bool, bytes]]]:
    out, base, built = [], 0, []
    for recs, codec, append_time, gaps, gap, kind in specs:
        base += gap
        deltas = [i * 2 for i in range(len(recs))] if gaps else None
        batch = build_batch(recs, base_offset=base, compression=codec,
                            log_append_time=append_time, offset_deltas=deltas,
                            control=kind == 0)
        out.append(batch)
        built.append((base, kind == 0, batch))
        base += (deltas[-1] if deltas else len(recs) - 1) + 1
    return b"".join(out), built


def _decode(blob: bytes, lo: int, hi: int, headers: bool = True):
    reader = _PartitionReader({"bootstrap.servers": "127.0.0.1:9"}, "t", 3, headers, 1.0)
    view = np.frombuffer(blob, np.uint8)
    starts, fields, bad = record_decode.scan_batches(view, 0, len(view))
    assert not bad
    return reader._decode(memoryview(blob), view, starts, fields, lo, hi)


@settings(max_examples=150, deadline=None)
@given(batch_specs, st.data())
def test_decoder_matches_the_reference_reader(specs, data):
    blob, built = _build(specs)
    last = max(r.offset for _, _, b in built for r in iter_records(b))
    lo = data.draw(st.integers(0, last + 1))
    hi = data.draw(st.integers(lo, last + 2))
    expected = [r for _, control, b in built if not control for r in iter_records(b)
                if lo <= r.offset < hi]
    batch = _decode(blob, lo, hi)
    rows = batch.to_pylist() if batch is not None else []
    assert [r["offset"] for r in rows] == [e.offset for e in expected]
    assert [(r["key"], r["value"]) for r in rows] == [(e.key, e.value) for e in expected]
    stamps = batch.column("timestamp").cast("int64").to_pylist() if batch is not None else []
    assert stamps == [e.timestamp * 1000 for e in expected]
    assert [[(h["key"], h["value"]) for h in r["headers"]] if r["headers"] else []
            for r in rows] == [list(e.headers) for e in expected]
    assert {r["topic"] for r in rows} <= {"t"} and {r["partition"] for r in rows} <= {3}


def test_timestamps_and_their_type():
    stamp = 1_700_000_000_123
    blob = build_batch([Record(stamp, b"k", b"v"), Record(stamp + 5, None, b"w")]) + build_batch(
        [Record(stamp, b"k", b"v")], base_offset=2, log_append_time=stamp + 999
    )
    batch = _decode(blob, 0, 10, headers=False)
    assert batch.column("timestamp").cast("int64").to_pylist() == [
        stamp * 1000, (stamp + 5) * 1000, (stamp + 999) * 1000
    ]
    assert batch.column("timestampType").to_pylist() == [0, 0, 1]
    assert batch.column("key").to_pylist() == [b"k", None, b"k"]
    assert batch.schema.names[-1] == "timestampType"


def _with_crc(batch: bytearray) -> bytes:
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    return bytes(batch)


def test_a_record_running_past_its_batch_is_corrupt():
    batch = bytearray(build_batch([Record(0, b"k", b"value")]))
    batch[61] = 0x7E  # the record's length varint: 63 bytes, more than the batch holds
    with pytest.raises(CorruptRecords, match="corrupt records in the batch at offset 0"):
        _decode(_with_crc(batch), 0, 10)


def test_a_header_running_past_its_record_is_corrupt():
    batch = bytearray(build_batch([Record(0, b"k", b"v", (("h", b"1"),))]))
    assert batch[70] == 2  # the header key's length varint: 1 byte
    batch[70] = 0x7E
    with pytest.raises(CorruptRecords, match="corrupt records"):
        _decode(_with_crc(batch), 0, 10)
    assert _decode(_with_crc(batch), 0, 10, headers=False).num_rows == 1  # headers unread


def test_a_crc_mismatch_is_corrupt():
    batch = bytearray(build_batch([Record(0, b"k", b"value")]))
    batch[-1] ^= 0xFF
    with pytest.raises(CorruptRecords, match="CRC"):
        _decode(bytes(batch), 0, 10)


def test_scan_stops_at_a_partial_batch_and_flags_impossible_lengths():
    one = [Record(0, b"k", b"v")]
    blob = build_batch(one) + build_batch(one, base_offset=1)
    view = np.frombuffer(blob[:-3], np.uint8)
    starts, _fields, bad = record_decode.scan_batches(view, 0, len(view))
    assert list(starts) == [0] and not bad
    broken = bytearray(blob)
    struct.pack_into(">i", broken, 8, 3)
    view = np.frombuffer(bytes(broken), np.uint8)
    starts, _fields, bad = record_decode.scan_batches(view, 0, len(view))
    assert len(starts) == 0 and bad


@settings(max_examples=40, deadline=None)
@given(
    topic=st.text(alphabet="abc._-01", min_size=1, max_size=30),
    partition=st.integers(0, 2**31 - 1),
    offset=st.integers(0, 2**62),
    wait=st.integers(0, 2**31 - 1),
    max_bytes=st.integers(1, 2**31 - 1),
)
def test_fetch_request_decodes_with_kio(topic, partition, offset, wait, max_bytes):
    frame = encode_fetch(7, b"me", topic.encode(), partition, offset, wait, max_bytes)
    assert struct.unpack_from(">i", frame)[0] == len(frame) - 4
    assert struct.unpack_from(">hhih", frame, 4) == (1, 11, 7, 2)
    request, size = entity_reader(load_request_schema(1, 11))(frame, 4 + 10 + 2)
    assert size == len(frame) - 16  # kio counts the bytes it read
    assert request.max_wait == datetime.timedelta(milliseconds=wait)
    assert request.max_bytes == max_bytes
    (t,) = request.topics
    assert t.topic == topic
    (p,) = t.partitions
    assert (p.partition, p.fetch_offset, p.partition_max_bytes) == (partition, offset, max_bytes)


@settings(max_examples=40, deadline=None)
@given(
    others=st.lists(st.integers(0, 50), max_size=3),
    hwm=st.integers(-1, 2**40),
    log_start=st.integers(-1, 2**40),
    code=st.sampled_from([0, 1, 6]),
    records=st.one_of(st.none(), st.binary(max_size=200)),
)
def test_fetch_response_is_read_as_kio_writes_it(others, hwm, log_start, code, records):
    import uuid

    def part(i, data):
        return PartitionResult(partition=i, error_code=code, high_watermark=hwm,
                               last_stable_offset=hwm, log_start_offset=log_start, records=data)

    topics = [
        TopicResult("other", uuid.uuid4(), [part(9, b"x")]),
        TopicResult("t", uuid.uuid4(), [part(i + 100, b"y") for i in others] + [part(4, records)]),
    ]
    body = b"\x00\x00\x00\x05" + b"".join(encode_fetch_response(11, topics))
    got = decode_fetch(memoryview(body), b"t", 4)
    assert (got.error_code, got.high_watermark, got.log_start_offset) == (code, hwm, log_start)
    assert bytes(got.records) == (records or b"")


def _serve_once(answers):
    """A listening socket that reads one request per answer and replies with it."""
    import socket
    import threading

    server = socket.create_server(("127.0.0.1", 0))

    def run():
        conn, _ = server.accept()
        with conn:
            for answer in answers:
                (size,) = struct.unpack(">i", conn.recv(4, socket.MSG_WAITALL))
                request = conn.recv(size, socket.MSG_WAITALL)
                (correlation,) = struct.unpack_from(">i", request, 4)
                body = answer(correlation)
                conn.sendall(struct.pack(">i", len(body)) + body)
            conn.recv(1)
        server.close()

    threading.Thread(target=run, daemon=True).start()
    return server.getsockname()[1]


def _api_versions(fetch_max: int):
    return lambda corr: struct.pack(">ihi", corr, 0, 1) + struct.pack(">hhh", 1, 4, fetch_max)


def test_a_broker_without_fetch_v11_is_unsupported():
    from chronik.spark.fetch_client import FetchConnection, Unsupported

    port = _serve_once([_api_versions(10)])
    with pytest.raises(Unsupported, match="v4-v10"):
        FetchConnection("127.0.0.1", port, "me", timeout_s=5)


def test_a_response_to_another_request_is_refused():
    from chronik.spark.fetch_client import FetchConnection, ProtocolError

    port = _serve_once([_api_versions(16), lambda corr: struct.pack(">i", corr + 5)])
    conn = FetchConnection("127.0.0.1", port, "me", timeout_s=5)
    try:
        conn.send_fetch(b"t", 0, 0, 100, 1024)
        with pytest.raises(ProtocolError, match="expected"):
            conn.receive()
    finally:
        conn.close()
