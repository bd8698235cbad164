"""A transactional id's state at its coordinator, as Kafka's TransactionMetadata keeps
it, and the states a transaction goes through:

    Empty -> Ongoing (AddPartitionsToTxn / AddOffsetsToTxn)
    Ongoing -> PrepareCommit | PrepareAbort (EndTxn, a timeout, a fencing InitProducerId)
    Prepare* -> Complete* (every partition has its marker)
    Complete* | Empty -> Ongoing (the next transaction) or Empty (InitProducerId)
    Empty | Complete* -> Dead (transactional.id.expiration.ms)
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class TxnState(enum.Enum):
    EMPTY = (0, "Empty")
    ONGOING = (1, "Ongoing")
    PREPARE_COMMIT = (2, "PrepareCommit")
    PREPARE_ABORT = (3, "PrepareAbort")
    COMPLETE_COMMIT = (4, "CompleteCommit")
    COMPLETE_ABORT = (5, "CompleteAbort")
    DEAD = (6, "Dead")
    PREPARE_EPOCH_FENCE = (7, "PrepareEpochFence")

    @property
    def id(self) -> int:
        return self.value[0]

    @property
    def kafka_name(self) -> str:
        return self.value[1]

    @classmethod
    def from_id(cls, state_id: int) -> TxnState:
        for state in cls:
            if state.id == state_id:
                return state
        raise ValueError(f"unknown transaction state {state_id}")

    @classmethod
    def from_name(cls, name: str) -> TxnState | None:
        for state in cls:
            if state.kafka_name == name:
                return state
        return None

    @property
    def preparing(self) -> bool:
        return self in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)

    @property
    def finished(self) -> bool:
        return self in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)

    @property
    def open(self) -> bool:
        """Counted as an open transaction: not yet fully committed or aborted."""
        return self in (
            TxnState.ONGOING,
            TxnState.PREPARE_COMMIT,
            TxnState.PREPARE_ABORT,
            TxnState.PREPARE_EPOCH_FENCE,
        )


@dataclass
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: TxnState
    timeout_ms: int
    txn_start_ms: int  # -1 when no transaction is under way
    last_update_ms: int
    partitions: set[tuple[str, int]] = field(default_factory=set)
    # Not stored: a write or marker round is under way (Kafka's pendingState); requests
    # that would change the state meanwhile get CONCURRENT_TRANSACTIONS.
    pending: bool = False
    # Not stored, and not kept by copy(): the partitions of the Ongoing record last
    # stored for this producer id and epoch, when it lists more than ``partitions``
    # (the next transaction registered with the previous one's completion, see
    # chronik.coordinator.transaction_coordinator); None otherwise.
    reserved: frozenset[tuple[str, int]] | None = None

    def copy(self, **changes: object) -> TxnMetadata:
        fields = dict(
            transactional_id=self.transactional_id,
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            state=self.state,
            timeout_ms=self.timeout_ms,
            txn_start_ms=self.txn_start_ms,
            last_update_ms=self.last_update_ms,
            partitions=set(self.partitions),
        )
        fields.update(changes)
        return TxnMetadata(**fields)  # type: ignore[arg-type]
