# Produce response body, hand-encoded: building and serialising kio entities cost
# more broker time than the append itself at small batches (versions 0-11):
#
#   responses: array of
#     name string
#     partition_responses: array of
#       index int32, error_code int16, base_offset int64,
#       [v2+] log_append_time_ms int64, [v5+] log_start_offset int64,
#       [v8+] record_errors array of (batch_index int32, batch_index_error_message
#             nullable string [flexible] tagged fields): the records that failed a batch,
#       [v8+] error_message nullable string
#       [flexible] tagged fields (v10+ current_leader: left out)
#     [flexible] tagged fields
#   [v1+] throttle_time_ms int32
#   [flexible] tagged fields (v10+ node_endpoints: left out)
#
# Versions 9+ are flexible: arrays and strings carry uvarint lengths + 1, a null
# string is uvarint 0, and each struct ends with its tagged-field section.
from __future__ import annotations

import struct

from chronik.protocol.framing import write_uvarint

# (index, batch index, message) of each record that made a batch fail
RecordErrors = tuple[tuple[int, str | None], ...]
# (index, error_code, base_offset, log_append_time_ms, log_start_offset, error_message,
#  record_errors)
PartitionResult = tuple[int, int, int, int, int, str | None, RecordErrors]
# (topic name, its partitions)
TopicResult = tuple[str, list[PartitionResult]]

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_V0 = struct.Struct(">ihq")
_V2 = struct.Struct(">ihqq")
_V5 = struct.Struct(">ihqqq")
_THROTTLE_ZERO = b"\x00\x00\x00\x00"
_ONE_BYTE = [bytes((n,)) for n in range(0x80)]


def encode_produce_response(
    version: int, topics: list[TopicResult], throttle_ms: int = 0
) -> list[bytes]:
    flexible = version >= 9
    out: list[bytes] = [_array_len(len(topics), flexible)]
    for name, partitions in topics:
        out.append(_string(name, flexible))
        out.append(_array_len(len(partitions), flexible))
        for index, error_code, base_offset, append_time, start_offset, message, record_errors in (
            partitions
        ):
            if version >= 5:
                out.append(_V5.pack(index, error_code, base_offset, append_time, start_offset))
            elif version >= 2:
                out.append(_V2.pack(index, error_code, base_offset, append_time))
            else:
                out.append(_V0.pack(index, error_code, base_offset))
            if version >= 8:
                if flexible:
                    # record_errors, then the error message, then tagged fields
                    if record_errors:
                        out.extend(_record_errors(record_errors, True))
                    else:
                        out.append(b"\x01")
                    out.append(b"\x00" if message is None else _string(message, True))
                    out.append(b"\x00")
                else:
                    if record_errors:
                        out.extend(_record_errors(record_errors, False))
                    else:
                        out.append(b"\x00\x00\x00\x00")
                    out.append(b"\xff\xff" if message is None else _string(message, False))
        if flexible:
            out.append(b"\x00")
    if version >= 1:
        out.append(_I32.pack(throttle_ms) if throttle_ms else _THROTTLE_ZERO)
    if flexible:
        out.append(b"\x00")
    # One piece: framing and the socket write handle one object, not a dozen.
    return [b"".join(out)]


def _record_errors(record_errors: RecordErrors, flexible: bool) -> list[bytes]:
    out = [_array_len(len(record_errors), flexible)]
    for batch_index, message in record_errors:
        out.append(_I32.pack(batch_index))
        if message is None:
            out.append(b"\x00" if flexible else b"\xff\xff")
        else:
            out.append(_string(message, flexible))
        if flexible:
            out.append(b"\x00")
    return out


def _string(value: str, flexible: bool) -> bytes:
    data = value.encode()
    return (_uvarint(len(data) + 1) if flexible else _I16.pack(len(data))) + data


def _array_len(n: int, flexible: bool) -> bytes:
    return _uvarint(n + 1) if flexible else _I32.pack(n)


def _uvarint(n: int) -> bytes:
    # Topic names and counts are almost always under 128: one byte, no loop.
    return _ONE_BYTE[n] if n < 0x80 else write_uvarint(n)
