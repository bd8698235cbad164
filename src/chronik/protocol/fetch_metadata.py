"""A Fetch request's session fields (KIP-227), as Kafka's FetchMetadata reads them.

session_id 0 is no session. session_epoch 0 asks for a full fetch that opens a new
session (closing the one named, if any), -1 for a full fetch without a session; 1, 2, ...
number the incremental fetches of a session, wrapping from 2^31-1 to 1.
"""

from __future__ import annotations

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
MAX_EPOCH = 2**31 - 1


def is_full(epoch: int) -> bool:
    return epoch in (INITIAL_EPOCH, FINAL_EPOCH)


def next_epoch(epoch: int) -> int:
    """The epoch that follows ``epoch`` (Kafka's FetchMetadata.nextEpoch)."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == MAX_EPOCH else epoch + 1
