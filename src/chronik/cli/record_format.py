"""How the console consumer prints one record.

text: the fields Kafka's console consumer prints, in its order and spelling,
separated by tabs: `CreateTime:MS  Partition:P  Offset:O  h1:v1,h2:v2  KEY<SEP>VALUE`
(only the ones asked for; the value always). A null key or value prints `null`,
no headers print `NO_HEADERS`.

json: one object per line with every field:
`{"topic", "partition", "offset", "timestamp", "timestampType", "key", "value",
"headers": [{"key", "value"}]}`; keys, values and header values are UTF-8 strings,
or base64 with `"keyEncoding"`/`"valueEncoding": "base64"` (per header `"encoding"`)
when they are not valid UTF-8.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass

from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, Message

TIMESTAMP_TYPES = {
    TIMESTAMP_CREATE_TIME: "CreateTime",
    TIMESTAMP_LOG_APPEND_TIME: "LogAppendTime",
}


@dataclass(frozen=True)
class TextFormat:
    key: bool = False
    offset: bool = False
    partition: bool = False
    timestamp: bool = False
    headers: bool = False
    key_separator: bytes = b"\t"

    def render(self, msg: Message) -> bytes:
        fields: list[bytes] = []
        if self.timestamp:
            kind, ms = msg.timestamp()
            fields.append(f"{TIMESTAMP_TYPES.get(kind, 'NoTimestampType')}:{ms}".encode())
        if self.partition:
            fields.append(b"Partition:%d" % msg.partition())
        if self.offset:
            fields.append(b"Offset:%d" % msg.offset())
        if self.headers:
            headers = msg.headers()
            if headers:
                fields.append(b",".join(k.encode() + b":" + (v or b"null") for k, v in headers))
            else:
                fields.append(b"NO_HEADERS")
        value = nullable(msg.value())
        if self.key:
            value = nullable(msg.key()) + self.key_separator + value
        fields.append(value)
        return b"\t".join(fields) + b"\n"


def nullable(data: bytes | None) -> bytes:
    return b"null" if data is None else data


class JsonFormat:
    def render(self, msg: Message) -> bytes:
        kind, ms = msg.timestamp()
        record: dict[str, object] = {
            "topic": msg.topic(),
            "partition": msg.partition(),
            "offset": msg.offset(),
            "timestamp": ms,
            "timestampType": TIMESTAMP_TYPES.get(kind, "NoTimestampType"),
        }
        put_bytes(record, "key", msg.key(), "keyEncoding")
        put_bytes(record, "value", msg.value(), "valueEncoding")
        headers = []
        for name, value in msg.headers() or ():
            header: dict[str, object] = {"key": name}
            put_bytes(header, "value", value, "encoding")
            headers.append(header)
        record["headers"] = headers
        return json.dumps(record, ensure_ascii=False).encode() + b"\n"


def put_bytes(target: dict[str, object], field: str, data: bytes | None, flag: str) -> None:
    if data is None:
        target[field] = None
        return
    try:
        target[field] = data.decode("utf-8")
    except UnicodeDecodeError:
        target[field] = base64.b64encode(data).decode("ascii")
        target[flag] = "base64"
