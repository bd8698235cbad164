"""The Kafka APIs this broker serves: API key -> handler module.

Each handler module names its API key and version range at its top, and has
`async def handle(ctx, request)`. The table in docs/compat.md lists them.
"""

from __future__ import annotations

import importlib
import logging
from types import ModuleType

log = logging.getLogger("chronik.apis")

MODULES = (
    "produce",
    "fetch",
    "list_offsets",
    "metadata",
    "offset_commit",
    "offset_fetch",
    "find_coordinator",
    "join_group",
    "heartbeat",
    "leave_group",
    "sync_group",
    "describe_groups",
    "list_groups",
    "api_versions",
    "create_topics",
    "delete_topics",
    "delete_records",
    "init_producer_id",
    "describe_configs",
    "alter_configs",
    "create_partitions",
    "delete_groups",
    "incremental_alter_configs",
    "offset_delete",
    "describe_cluster",
    "offset_for_leader_epoch",
    "elect_leaders",
    "add_partitions_to_txn",
    "add_offsets_to_txn",
    "end_txn",
    "write_txn_markers",
    "txn_offset_commit",
    "describe_producers",
    "describe_transactions",
    "list_transactions",
    "sasl_handshake",
    "sasl_authenticate",
    "describe_user_scram_credentials",
    "alter_user_scram_credentials",
    "describe_acls",
    "create_acls",
    "delete_acls",
    "describe_client_quotas",
    "alter_client_quotas",
    # chronik's own inter-broker request (not a Kafka API)
    "key_counts",
)


def _load() -> dict[int, ModuleType]:
    handlers: dict[int, ModuleType] = {}
    for name in MODULES:
        try:
            module = importlib.import_module(f"chronik.broker.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"chronik.broker.{name}":
                raise
            continue
        handlers[module.API_KEY] = module
    return handlers


HANDLERS: dict[int, ModuleType] = _load()
