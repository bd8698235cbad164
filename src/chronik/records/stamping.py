# The records section of a batch rewritten with a chronik-version header on each keyed
# record (chronik.records.versions states the headers and the batch-level rules). Each
# record keeps its bytes up to the end of its value, then its headers minus any
# chronik-version, then the broker's chronik-version:
#   length varint | attributes | timestampDelta | offsetDelta | key | value |
#   headerCount varint (+1) | kept headers | "chronik-version" = ASCII decimal version
# Records without a key keep their bytes (less any chronik-version header they carry).
#
# This is the one per-record loop on the produce path of an opted-in topic, so it is
# compiled with mypyc when the package is built (setup.py; `make` rebuilds it when this
# file changes) and runs as plain Python where no compiler was at hand. Kept free of
# classes and of third-party imports so the compiled and the interpreted module behave
# the same; chronik.records.versions picks whichever is current.
from __future__ import annotations

from collections.abc import Callable

from chronik.records.batch import CORRUPT_MESSAGE, InvalidBatch
from chronik.records.varint import write_varint

VERSION_HEADER = "chronik-version"
EXPECTED_HEADER = "chronik-expected-version"
_VERSION_KEY = VERSION_HEADER.encode()
_EXPECTED_KEY = EXPECTED_HEADER.encode()
# The encoded header key of chronik-version (length varint + bytes), written once per record.
_VERSION_KEY_FIELD = bytes([len(_VERSION_KEY) << 1]) + _VERSION_KEY
_MAX_VERSION_DIGITS = 18


def key_text(key: bytes) -> str:
    """A key as an error message names it: quoted UTF-8 if printable, else hex."""
    try:
        text = key.decode("utf-8")
    except UnicodeDecodeError:
        return "0x" + key.hex()
    if text.isprintable():
        return repr(text)
    return "0x" + key.hex()


def parse_version(value: bytes | None) -> int | None:
    """A header value as a non-negative decimal, or None if it is not one."""
    if value is None or not 0 < len(value) <= _MAX_VERSION_DIGITS or not value.isdigit():
        return None
    return int(value)


def _varint(body: bytes, pos: int) -> tuple[int, int]:
    """(value, next position) of the zig-zag varint at ``pos``; IndexError past the end."""
    z = body[pos]
    if z < 0x80:
        return (z >> 1) ^ -(z & 1), pos + 1
    z, pos = _zigzag(body, pos)
    return (z >> 1) ^ -(z & 1), pos


def _zigzag(body: bytes, pos: int) -> tuple[int, int]:
    """(raw zig-zag value, next position) of a varint of more than one byte."""
    z = 0
    shift = 0
    while True:
        if shift > 63:
            raise InvalidBatch(CORRUPT_MESSAGE, "malformed records: malformed varint")
        b = body[pos]  # IndexError past the end: the caller's CORRUPT_MESSAGE
        pos += 1
        z |= (b & 0x7F) << shift
        if b < 0x80:
            return z, pos
        shift += 7


def _length_bytes(n: int) -> bytes:
    """The varint of a non-negative ``n``."""
    z = n << 1
    if z < 0x80:
        return _ONE_BYTE[z]
    if z < 0x4000:
        return bytes(((z & 0x7F) | 0x80, z >> 7))
    out = bytearray()
    write_varint(out, n)
    return bytes(out)


_ONE_BYTE = [bytes((i,)) for i in range(0x80)]


def _version_field(version: int) -> bytes:
    """The encoded chronik-version header (key and value fields) for ``version``."""
    digits = str(version).encode()
    return _VERSION_KEY_FIELD + _ONE_BYTE[len(digits) << 1] + digits


# The header fields of the versions most records get, made once.
_VERSION_FIELDS = [_version_field(v) for v in range(1024)]
# The decimal digits of those versions: an expected version equal to them holds.
_DIGITS = [b"%d" % v for v in range(1024)]
_EXPECTED_LEN = len(_EXPECTED_KEY)
_VERSION_LEN = len(_VERSION_KEY)


def stamp_records(
    body: bytes, records_count: int, count: Callable[[bytes], int]
) -> tuple[
    list[bytes], list[bytes | int], list[tuple[int, str]], dict[bytes, int]
]:
    """The stamped records section as slices to join (the first left empty for the
    caller), key, version and offset delta of each keyed record one after another in one
    flat list (as the key index inserts them), the failed checks and each key's version
    count after the batch. IndexError means a field runs past the section."""
    parts: list[bytes] = [b""]
    add = parts.append
    pending: dict[bytes, int] = {}
    versions: list[bytes | int] = []
    put = versions.append
    failures: list[tuple[int, str]] = []
    fields = _VERSION_FIELDS
    one = _ONE_BYTE
    pos = 0
    size = len(body)
    for index in range(records_count):
        rec_at = pos
        length, pos = _varint(body, pos)
        end = pos + length
        if length < 1 or end > size:
            raise InvalidBatch(CORRUPT_MESSAGE, "malformed records: a record runs past its batch")
        start = pos
        field = pos + 1  # attributes
        _, field = _varint(body, field)  # timestamp delta
        # offset delta
        offset_delta, field = _varint(body, field)
        # key
        key_len, field = _varint(body, field)
        key_at = field
        if key_len > 0:
            field += key_len
        # value
        value_len, field = _varint(body, field)
        if value_len > 0:
            field += value_len
        if field > end:
            raise InvalidBatch(CORRUPT_MESSAGE, "malformed records: a field runs past its record")
        fixed_end = field
        count_headers, field = _varint(body, field)
        if count_headers < 0:
            raise InvalidBatch(CORRUPT_MESSAGE, "malformed records: negative header count")
        headers_at = field
        dropped: list[tuple[int, int]] | None = None
        expected: bytes | None = None
        has_expected = False
        for _ in range(count_headers):
            h_start = field
            name_len, field = _varint(body, field)
            name_at = field
            if name_len > 0:
                field += name_len
            value_len, field = _varint(body, field)
            value_at = field
            if value_len > 0:
                field += value_len
            if field > end:
                raise InvalidBatch(
                    CORRUPT_MESSAGE, "malformed records: a field runs past its record"
                )
            if name_len == _VERSION_LEN and body.startswith(_VERSION_KEY, name_at):
                if dropped is None:
                    dropped = []
                dropped.append((h_start, field))  # never trusted from a client
            elif name_len == _EXPECTED_LEN and body.startswith(_EXPECTED_KEY, name_at):
                has_expected = True
                expected = body[value_at : value_at + value_len] if value_len >= 0 else None
        if field != end:
            raise InvalidBatch(CORRUPT_MESSAGE, "malformed records: record length mismatch")
        if key_len >= 0:
            key = body[key_at : key_at + key_len]
            current = pending.get(key)
            if current is None:
                current = count(key)
            if has_expected and not (current < 1024 and expected == _DIGITS[current]):
                wanted = parse_version(expected)
                if wanted is None:
                    failures.append(
                        (index, f"bad {EXPECTED_HEADER} on key {key_text(key)}: {expected!r} "
                         "is not a non-negative integer")
                    )
                elif wanted != current:
                    failures.append(
                        (index, f"version conflict on key {key_text(key)}: "
                         f"expected {wanted}, actual {current}")
                    )
            pending[key] = current + 1
            put(key)
            put(current)
            put(offset_delta)
            vfield = fields[current] if current < 1024 else _version_field(current)
            if dropped is None:
                # The common record: its bytes up to the header count, the count plus one,
                # its headers as they are, the version.
                n = count_headers + 1
                count_bytes = one[n << 1] if n < 64 else _length_bytes(n)
                z = (fixed_end - start + len(count_bytes) + end - headers_at + len(vfield)) << 1
                if z < 0x4000:
                    add(one[z] if z < 0x80 else bytes(((z & 0x7F) | 0x80, z >> 7)))
                else:
                    add(_length_bytes(z >> 1))
                add(body[start:fixed_end])
                add(count_bytes)
                add(body[headers_at:end])
                add(vfield)
                pos = end
                continue
        else:
            if has_expected:
                failures.append((index, f"{EXPECTED_HEADER} on a record without a key"))
            if dropped is None:
                add(body[rec_at:end])
                pos = end
                continue
            vfield = b""
        # Headers to drop: the fixed part, the kept headers, the version if keyed.
        kept = count_headers - len(dropped)
        rec = [body[start:fixed_end], _length_bytes(kept + (len(vfield) > 0))]
        at = headers_at
        for d_start, d_end in dropped:
            rec.append(body[at:d_start])
            at = d_end
        rec.append(body[at:end])
        rec.append(vfield)
        out = b"".join(rec)
        add(_length_bytes(len(out)))
        add(out)
        pos = end
    return parts, versions, failures, pending
