"""chronik's event store from Python: one aggregate's events read by key, appended with an
expected version, and all events caught up on through a consumer group.

    from chronik.eventstore import EventStore, VersionConflict

    store = EventStore("127.0.0.1:9092", "http://127.0.0.1:8080")
    store.append("accounts", "acc-1", [{"type": "opened"}], expected_version=0)
    events = store.read("accounts", "acc-1")
    try:
        store.append("accounts", "acc-1", [{"type": "deposited", "amount": 5}],
                      expected_version=len(events))
    except VersionConflict as conflict:
        ...  # someone appended meanwhile: reload, decide again, retry

Reads and appends go to the broker's HTTP API (chronik.http.eventstore). Appends use it
rather than a Kafka producer because only the broker's answer to them carries what an
event store caller needs: the versions given, and on a conflict the key's actual version
(librdkafka reports INVALID_RECORD as "Broker failed to validate record", without the
broker's message), and an append of several events is one batch, all or none (librdkafka
may split the events of one flush over several batches). Kafka-protocol appends remain
open to any client (the chronik-expected-version header): ``store.producer()`` gives a
confluent-kafka Producer set up for them (acks=all, idempotence, partitioner
murmur2_random, so a key lands where the HTTP API puts it).

Catching up (``catch_up``, ``subscribe``) is a confluent-kafka consumer group; each
event's version comes from its chronik-version header, and its offset is committed only
after it was handled (at least once).

An EventStore may be shared between threads (each thread gets its own HTTP connection).
Module-level ``append``, ``read`` and ``version`` use a store made from the environment:
CHRONIK_BOOTSTRAP (default 127.0.0.1:9092) and CHRONIK_HTTP (default
http://127.0.0.1:8080).
"""

from __future__ import annotations

from chronik.eventstore.config import DEFAULT_BOOTSTRAP as DEFAULT_BOOTSTRAP
from chronik.eventstore.config import DEFAULT_HTTP as DEFAULT_HTTP
from chronik.eventstore.default import append, default_store, read, version
from chronik.eventstore.encoding import Headers as Headers
from chronik.eventstore.encoding import encode_value as encode_value
from chronik.eventstore.errors import EventStoreError, VersionConflict
from chronik.eventstore.errors import raise_for as raise_for
from chronik.eventstore.events import EXPECTED_HEADER as EXPECTED_HEADER
from chronik.eventstore.events import VERSION_HEADER as VERSION_HEADER
from chronik.eventstore.events import Appended, Event
from chronik.eventstore.reader import PAGE as PAGE
from chronik.eventstore.store import EventStore
from chronik.eventstore.subscription import Subscription
from chronik.eventstore.transport import IDLE_RECONNECT_S as IDLE_RECONNECT_S

# The names imported "as" themselves stay importable from the package, as when it was one
# module, without joining ``from chronik.eventstore import *``.
__all__ = [
    "Appended",
    "Event",
    "EventStore",
    "EventStoreError",
    "Subscription",
    "VersionConflict",
    "append",
    "default_store",
    "read",
    "version",
]
