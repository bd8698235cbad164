"""Partition reassignment, Kafka's way (KIP-455): the rules, without ZooKeeper.

A reassignment of a partition from its original replicas (OR) to target replicas (TR)
is written into the topic's znode as the replica list (TR + OR) without repeats, with
TR - OR under adding_replicas and OR - TR under removing_replicas. The new replicas
then fetch from the leader like any follower and the leader takes them into the ISR once
they have caught up. When every target replica is in the ISR the controller completes
it in one ZooKeeper transaction: the replica list becomes TR, the leader moves to a
target replica if it was leaving, the leaving ones leave the ISR, and the leader epoch
goes up so they are fenced. Brokers that no longer hold a replica delete their copy.

A new reassignment of a partition being reassigned starts from the original replicas,
so cancelling one (a null target) is a reassignment back to them, whose new replicas,
never needed, go at once.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from chronik.cluster.znodes import Assignment, PartitionState
from chronik.protocol import errors


@dataclass(frozen=True)
class Change:
    """A partition's new replica list and its adding/removing replicas."""

    replicas: list[int]
    adding: list[int]
    removing: list[int]


class Refused(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def reassign(
    assignment: Assignment, partition: int, target: list[int] | None, brokers: set[int]
) -> Change:
    """The partition's replicas once ``target`` is asked for (None: cancel the one in
    progress), as Kafka's ReplicaAssignment.reassignTo. Raises Refused with Kafka's
    error for a target it would refuse."""
    current = assignment.replicas.get(partition)
    if current is None:
        raise Refused(errors.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.")
    original = assignment.original(partition)
    if target is None:
        if not assignment.reassigning(partition):
            raise Refused(
                errors.NO_REASSIGNMENT_IN_PROGRESS,
                "No ongoing reassignment for this partition.",
            )
        target = original
    else:
        check_target(target, brokers)
    if set(target) == set(original) and not assignment.reassigning(partition):
        # Only the order changes (the preferred leader): nothing to copy.
        return Change(list(target), [], [])
    replicas = list(dict.fromkeys([*target, *original]))
    return Change(
        replicas,
        [r for r in replicas if r not in original],
        [r for r in original if r not in target],
    )


def check_target(target: list[int], brokers: set[int]) -> None:
    if not target:
        raise Refused(
            errors.INVALID_REPLICA_ASSIGNMENT,
            "Empty replica list specified in partition reassignment.",
        )
    if len(set(target)) != len(target):
        raise Refused(
            errors.INVALID_REPLICA_ASSIGNMENT,
            f"Duplicate replica ids in partition reassignment replica list: {target}",
        )
    unknown = [b for b in target if b not in brokers]
    if unknown:
        raise Refused(
            errors.INVALID_REPLICA_ASSIGNMENT,
            f"The proposed assignment contains non-existent brokerIDs: {unknown}",
        )


def apply(assignment: Assignment, partition: int, change: Change) -> None:
    assignment.replicas[partition] = list(change.replicas)
    for lists, value in ((assignment.adding, change.adding),
                         (assignment.removing, change.removing)):
        if value:
            lists[partition] = list(value)
        else:
            lists.pop(partition, None)


def completion(
    assignment: Assignment,
    partition: int,
    state: PartitionState | None,
    live: set[int],
    controller_epoch: int,
    shutting_down: Collection[int] = (),
) -> PartitionState | None:
    """The partition state that completes the reassignment, or None while it cannot
    complete (a target replica not in the ISR yet, or no target replica to lead)."""
    target = assignment.target(partition)
    if state is None or not target or not set(target) <= set(state.isr) & live:
        return None
    barred = shutting_down
    if state.leader in target and state.leader in live and state.leader not in barred:
        leader = state.leader
    else:
        eligible = [r for r in target if r in live and r in state.isr and r not in barred]
        if not eligible:
            return None
        leader = eligible[0]
    isr = tuple(r for r in state.isr if r in target)
    return PartitionState(
        leader, state.leader_epoch + 1, isr, controller_epoch, state.zk_version
    )
