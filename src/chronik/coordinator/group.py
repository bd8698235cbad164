"""The state of one classic consumer group: members, generation, chosen protocol.

Modelled on Kafka's GroupMetadata. Only the coordinator changes it, always on the
broker's event loop, so nothing here locks.
"""

from __future__ import annotations

import asyncio
import enum
from collections import Counter
from dataclasses import dataclass, field

from chronik.coordinator.offsets_codec import OffsetValue


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(slots=True)
class JoinResult:
    error: int
    generation: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    member_id: str = ""
    # (member_id, group_instance_id, metadata) for the leader; empty for followers.
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)
    skip_assignment: bool = False


@dataclass(slots=True)
class SyncResult:
    error: int
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(eq=False, slots=True)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join_future: asyncio.Future[JoinResult] | None = None
    sync_future: asyncio.Future[SyncResult] | None = None
    session_timer: asyncio.TimerHandle | None = None
    # A member that joined but has not yet been through a completed join is "new":
    # if it disappears before the join completes, the rebalance does not wait for it.
    is_new: bool = False

    @property
    def awaiting_join(self) -> bool:
        return self.join_future is not None

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata(self, protocol: str) -> bytes:
        for name, data in self.protocols:
            if name == protocol:
                return data
        return b""

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocols == protocols

    def cancel_session_timer(self) -> None:
        if self.session_timer is not None:
            self.session_timer.cancel()
            self.session_timer = None


@dataclass(eq=False, slots=True)
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader_id: str | None = None
    state_timestamp: int = -1
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)
    # Member ids handed out with MEMBER_ID_REQUIRED, not joined yet, with their expiry timers.
    pending_members: dict[str, asyncio.TimerHandle | None] = field(default_factory=dict)
    offsets: dict[tuple[str, int], OffsetValue] = field(default_factory=dict)
    # Log position of the record behind each offset, so late fsyncs never win.
    offset_positions: dict[tuple[str, int], int] = field(default_factory=dict)
    # Offsets committed inside open transactions, per producer id: (value, log position,
    # -1 while the write is in flight). Visible only once the transaction commits.
    pending_txn_offsets: dict[int, dict[tuple[str, int], tuple[OffsetValue, int]]] = field(
        default_factory=dict
    )
    join_timer: asyncio.TimerHandle | None = None
    # Kafka's InitialDelayedJoin: a first rebalance waits a little for more members.
    in_initial_delay: bool = False
    new_member_added: bool = False
    initial_delay_remaining_ms: int = 0

    def is_empty(self) -> bool:
        return not self.members

    def has_pending_offset(self, tp: tuple[str, int]) -> bool:
        return any(tp in offsets for offsets in self.pending_txn_offsets.values())

    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        member.cancel_session_timer()
        if (
            member.group_instance_id is not None
            and self.static_members.get(member.group_instance_id) == member_id
        ):
            del self.static_members[member.group_instance_id]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def supported_protocols(self) -> set[str]:
        """Protocols every member supports."""
        common: set[str] | None = None
        for m in self.members.values():
            names = set(m.protocol_names())
            common = names if common is None else common & names
        return common or set()

    def supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        names = {name for name, _ in protocols}
        if not self.members:
            return bool(protocol_type) and bool(names)
        return protocol_type == self.protocol_type and bool(names & self.supported_protocols())

    def select_protocol(self) -> str:
        """Each member votes for its most preferred protocol that all support."""
        candidates = self.supported_protocols()
        votes: Counter[str] = Counter()
        for m in self.members.values():
            votes[next(p for p in m.protocol_names() if p in candidates)] += 1
        # Ties go to the protocol the leader prefers most, for a stable choice.
        best = max(votes.values())
        leader = self.members.get(self.leader_id or "")
        order = leader.protocol_names() if leader else sorted(votes)
        return next(p for p in order if votes.get(p) == best)

    def all_members_joined(self) -> bool:
        return not self.pending_members and all(m.awaiting_join for m in self.members.values())

    def max_rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to, or None when they cannot be read."""
        if self.protocol_type != "consumer" or self.protocol is None:
            return None
        topics: set[str] = set()
        for m in self.members.values():
            parsed = parse_subscription_topics(m.metadata(self.protocol))
            if parsed is None:
                return None
            topics.update(parsed)
        return topics


def parse_subscription_topics(data: bytes) -> list[str] | None:
    """Topic names from a ConsumerProtocolSubscription (int16 version, [string] topics)."""
    try:
        pos = 2
        count = int.from_bytes(data[pos : pos + 4], "big", signed=True)
        pos += 4
        if count < 0 or len(data) < 6:
            return None
        topics = []
        for _ in range(count):
            n = int.from_bytes(data[pos : pos + 2], "big", signed=True)
            pos += 2
            if n < 0 or pos + n > len(data):
                return None
            topics.append(data[pos : pos + n].decode())
            pos += n
        return topics
    except (UnicodeDecodeError, ValueError):
        return None
