"""A fetcher's side of a fetch session (KIP-227), as Kafka's FetchSessionHandler keeps it.

The first request is full (session_epoch 0) and names every partition; if the leader
answers a session id, the following requests name only the partitions added or whose
fetch position, log start or leader epoch changed, and forget the ones no longer
fetched; the leader's answer carries only the partitions with news. A session error
(FETCH_SESSION_ID_NOT_FOUND after a leader restart or eviction, INVALID_FETCH_SESSION_EPOCH,
FETCH_SESSION_TOPIC_ID_ERROR) or a broken connection makes the next request full again.
A leader that keeps no session for it (a full cache, sessions switched off) answers
session id 0, and every request stays full.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Mapping
from typing import Generic, TypeVar

from chronik.protocol import errors
from chronik.protocol.fetch_metadata import INITIAL_EPOCH, INVALID_SESSION_ID, next_epoch

log = logging.getLogger("chronik.replication")

K = TypeVar("K", bound=Hashable)  # a partition
V = TypeVar("V")  # its fetch fields, compared with ==


class FetchSessionHandler(Generic[K, V]):
    def __init__(self, peer: str) -> None:
        self.peer = peer  # for the log: "broker 2"
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        self._sent: dict[K, V] = {}

    def build(self, wanted: Mapping[K, V]) -> tuple[dict[K, V], list[K]]:
        """What the next request sends (each partition's fetch fields) and forgets; it
        carries ``session_id`` and ``epoch``."""
        previous = self._sent
        self._sent = dict(wanted)
        if self.epoch == INITIAL_EPOCH:
            return dict(wanted), []
        send = {key: data for key, data in wanted.items() if previous.get(key) != data}
        forget = [key for key in previous if key not in wanted]
        return send, forget

    def handle_response(self, error: int, session_id: int) -> bool:
        """Takes in the answer's session fields; False when its partitions are to be
        ignored (a session error: the next request is full)."""
        if error != errors.NONE:
            log.info("%s could not serve fetch session %d at epoch %d: error %d; the next "
                     "fetch is full", self.peer, self.session_id, self.epoch, error)
            if error == errors.FETCH_SESSION_ID_NOT_FOUND:
                self.session_id = INVALID_SESSION_ID
            self.epoch = INITIAL_EPOCH
            return False
        if session_id == INVALID_SESSION_ID:
            # No session kept (or the leader closed it): full fetches from here on.
            self.session_id, self.epoch = INVALID_SESSION_ID, INITIAL_EPOCH
        elif self.epoch == INITIAL_EPOCH:
            if session_id != self.session_id:
                log.info("%s opened fetch session %d for %d partitions", self.peer,
                         session_id, len(self._sent))
            self.session_id, self.epoch = session_id, next_epoch(INITIAL_EPOCH)
        else:
            self.epoch = next_epoch(self.epoch)
        return True

    def handle_error(self) -> None:
        """The request failed (no answer): the next one is full, closing this session."""
        self.epoch = INITIAL_EPOCH
