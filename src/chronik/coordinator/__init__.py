"""Consumer groups and committed offsets."""

from chronik.coordinator.group_coordinator import GroupCoordinator

__all__ = ["GroupCoordinator"]
