"""KeyCounts (API key 32000), version 0: chronik's own inter-broker request, not a Kafka
API (so not listed in ApiVersions). The leader's side: the counts of keys with rows below
an offset, a page at a time, for a follower that starts over (the request, its wire
format and the follower's use of it: chronik.protocol.key_counts). Needs CLUSTER_ACTION
on the Cluster, as a follower Fetch does.
"""

from __future__ import annotations

import sqlite3

from chronik.broker.context import RequestContext
from chronik.broker.topics import data_partition
from chronik.protocol import errors
from chronik.protocol.key_counts import (
    API_KEY,
    MAX_KEYS,
    Request,
    decode_request,
    encode_response,
)
from chronik.security.acl_model import Operation
from chronik.storage.errors import KafkaStorageError

__all__ = ["API_KEY", "VERSIONS", "decode_request", "handle"]

VERSIONS = (0, 0)
# Decoded by decode_request, not kio, which knows no schema for it (connection.py).
RAW = True
ADVERTISED = False


async def handle(ctx: RequestContext, request: Request) -> list[bytes]:
    if not ctx.allowed_on_cluster(Operation.CLUSTER_ACTION):
        return encode_response(errors.CLUSTER_AUTHORIZATION_FAILED, [], False)
    broker = ctx.services
    plog, code = data_partition(
        broker, broker.catalog.get(request.topic), request.topic, request.partition
    )
    if plog is None:
        return encode_response(code, [], False)
    if not plog.config.key_versioning:
        return encode_response(errors.NONE, [], False)
    limit = max(1, min(request.max_keys, MAX_KEYS))
    try:
        counts = plog.key_counts_below(request.below, request.after, limit + 1)
    except (KafkaStorageError, sqlite3.Error):
        return encode_response(errors.KAFKA_STORAGE_ERROR, [], False)
    return encode_response(errors.NONE, counts[:limit], len(counts) > limit)
