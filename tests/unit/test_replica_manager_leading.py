"""Which partitions a broker serves as leader (ReplicaManager.leading, behind every data
request's NOT_LEADER_OR_FOLLOWER): a leader whose epoch the view has raised keeps leading
at the epoch it has until it takes the new one up, as Kafka's leader does until its
LeaderAndIsr arrives; a broker the view has just made leader serves nothing until it has
taken the leadership up."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from test_storage_support import append, client_batch, open_log

from chronik.cluster.replica_manager import FOLLOWER, LEADER, Replica, ReplicaManager
from chronik.cluster.znodes import PartitionState
from chronik.storage.partition_log import PartitionLog

NODE = 1


def manager() -> ReplicaManager:
    config = SimpleNamespace(
        replica_lag_time_max_ms=30_000, num_replica_fetchers=1, replica_fetch_backoff_ms=1000
    )
    node = SimpleNamespace(
        node_id=NODE,
        config=config,
        view=SimpleNamespace(brokers={}),
        wake_fetches=lambda *args, **kwargs: None,
    )
    return ReplicaManager(node)  # type: ignore[arg-type]


def replica(rm: ReplicaManager, log: PartitionLog, role: str, epoch: int) -> Replica:
    r = Replica("t", 0, log, role=role, leader_id=NODE if role == LEADER else 2,
                leader_epoch=epoch, isr=(NODE, 2), assigned=[NODE, 2])
    rm.replicas[r.key] = r
    return r


@pytest.fixture
def log(tmp_path: Path) -> PartitionLog:
    plog = open_log(tmp_path / "t-0")
    plog.replicated = True
    return plog


def test_a_leader_goes_on_leading_until_it_takes_up_its_raised_epoch(log) -> None:
    rm = manager()
    r = replica(rm, log, LEADER, 3)
    assert rm.leading("t", 0, 3) is log
    # The view has epoch 4 (a reassignment completed, the leader staying): this broker
    # has not taken it up yet, and serves what it served a moment before.
    assert rm.leading("t", 0, 4) is log
    rm._follow_state(r, PartitionState(NODE, 4, (NODE, 2), 1, 7))
    assert (r.role, r.leader_epoch, log.leader_epoch) == (LEADER, 4, 4)
    assert rm.leading("t", 0, 4) is log
    assert log.epochs.entries[-1] == (4, log.end_offset)


def test_an_idempotent_producer_goes_on_in_sequence_through_the_epoch_change(log) -> None:
    """What the rule is for: the producer's pipeline is taken whole, no batch refused
    while the new epoch is taken up, so the next one is in sequence."""
    rm = manager()
    r = replica(rm, log, LEADER, 3)
    log.leader_epoch = 3
    for seq in range(3):
        served = rm.leading("t", 0, 4)  # the view already has epoch 4
        assert served is not None
        append(served, client_batch(1, pid=7, epoch=0, seq=seq))
    rm._follow_state(r, PartitionState(NODE, 4, (NODE, 2), 1, 7))
    served = rm.leading("t", 0, 4)
    assert served is not None
    result = append(served, client_batch(1, pid=7, epoch=0, seq=3))
    assert (result.base_offset, result.duplicate) == (3, False)
    assert log.epochs.entries == [(3, 0), (4, 3)]


def test_a_broker_made_leader_serves_nothing_until_it_takes_the_leadership_up(log) -> None:
    rm = manager()
    r = replica(rm, log, FOLLOWER, 3)
    assert rm.leading("t", 0, 4) is None  # the view names it leader at 4, not taken up
    rm._follow_state(r, PartitionState(NODE, 4, (NODE, 2), 1, 7))
    assert rm.leading("t", 0, 4) is log
    r.role = ""  # stepped aside (its epoch checkpoint could not be written)
    assert rm.leading("t", 0, 4) is None


def test_a_view_behind_the_taken_up_epoch_or_a_closed_log_is_not_served(log) -> None:
    rm = manager()
    replica(rm, log, LEADER, 5)
    assert rm.leading("t", 0, 4) is None
    assert rm.leading("t", 1, 5) is None  # no replica of that partition here
    log.close()
    assert rm.leading("t", 0, 5) is None
