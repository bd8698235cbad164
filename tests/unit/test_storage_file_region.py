"""File regions: a fetch's record bytes named in the segment file and sent with sendfile,
the same bytes a read returns, and an error, not other bytes, once the file changed."""
from __future__ import annotations

import os
import socket
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_storage_support import NOW, append, client_batch, open_log, small_config

from chronik.records.reader import iter_batches
from chronik.storage.file_cache import FILES
from chronik.storage.file_region import FileRegion

HC = [HealthCheck.function_scoped_fixture]


def fill(log, sizes):
    for i, n in enumerate(sizes):
        append(log, client_batch(n, ts=NOW + i, value=b"%d" % i * 7))


def received(sock: socket.socket, size: int) -> bytes:
    out = bytearray()
    while len(out) < size:
        chunk = sock.recv(size - len(out))
        assert chunk
        out += chunk
    return bytes(out)


@settings(max_examples=20, deadline=None, suppress_health_check=HC)
@given(sizes=st.lists(st.integers(1, 12), min_size=1, max_size=40),
       limit=st.integers(1, 5000), min_one=st.booleans())
def test_a_region_holds_what_a_read_returns(tmp_path_factory, sizes, limit, min_one):
    log = open_log(tmp_path_factory.mktemp("log") / "t-0")
    fill(log, sizes)
    for offset in range(0, log.end_offset, 3):
        data = log.read(offset, limit, min_one)
        region = log.read(offset, limit, min_one, region=True)
        if not data:
            assert region == b""
            continue
        assert isinstance(region, FileRegion)
        assert len(region) == len(data)
        assert region.read() == data
        assert region.read(len(data) // 2) == data[len(data) // 2 :]
    log.close()


def test_a_region_read_sets_the_next_reads_hint_as_a_read_does(tmp_path):
    log = open_log(tmp_path / "t-0", small_config(segment_bytes=10**6))
    fill(log, [1] * 50)
    offset, seen = 0, []
    while offset < log.end_offset:
        region = log.read(offset, 300, region=True)
        data = region.read()
        for _, h in iter_batches(data):
            seen.append(h.base_offset)
            offset = h.last_offset + 1
    assert seen == list(range(50))
    assert offset in log._read_hints or offset == log.end_offset
    log.close()


def test_send_writes_the_region_to_a_socket(tmp_path):
    log = open_log(tmp_path / "t-0", small_config(segment_bytes=10**6))
    fill(log, [5] * 40)
    region = log.read(3, 10_000, region=True)
    a, b = socket.socketpair()
    with a, b:
        a.setblocking(False)
        assert region.send(a.fileno()) == len(region)
        assert received(b, len(region)) == region.read()
    log.close()


def test_send_stops_where_the_socket_is_full_and_the_rest_can_be_read(tmp_path):
    path = tmp_path / "seg"
    path.write_bytes(os.urandom(4 << 20))
    file = FILES.file(path, os.O_RDONLY)
    region = FileRegion(file, 1000, (4 << 20) - 1000)
    a, b = socket.socketpair()
    with a, b:
        a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        a.setblocking(False)
        sent = region.send(a.fileno())
        assert 0 < sent < len(region)  # no reader: it stops, it does not block
        rest = region.read(sent)
        assert len(rest) == len(region) - sent
        a.setblocking(True)
        got = bytearray()
        reader = threading.Thread(target=lambda: got.extend(received(b, len(region))))
        reader.start()
        a.sendall(rest)
        reader.join(10)
        assert bytes(got) == path.read_bytes()[1000:]
    file.retire()


def test_a_shortened_file_is_an_error_not_fewer_bytes(tmp_path):
    path = tmp_path / "seg"
    path.write_bytes(b"x" * 10_000)
    file = FILES.file(path, os.O_RDONLY)
    region = FileRegion(file, 2000, 8000)
    os.truncate(path, 5000)
    with pytest.raises(OSError, match="no longer there"):
        region.read()
    a, b = socket.socketpair()
    with a, b:
        a.setblocking(False)
        with pytest.raises(OSError, match="no longer there"):
            region.send(a.fileno())
    file.retire()
