"""IncrementalAlterConfigs (API key 44), versions 0-1: SET, DELETE, APPEND and SUBTRACT on
topics and brokers (Kafka's dynamic broker configs: chronik.broker.dynamic_configs).

APPEND and SUBTRACT work as in Kafka's controller: only on LIST configs; the list they
change is the topic's override, or else the config's own default (not the broker's
setting); APPEND adds the values not yet present, SUBTRACT removes them.
Each resource needs ALTER_CONFIGS, as Kafka's KafkaApis checks it: a topic on the Topic
(TOPIC_AUTHORIZATION_FAILED), a broker or broker logger on the Cluster
(CLUSTER_AUTHORIZATION_FAILED), a group on the Group (GROUP_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from typing import Any

from chronik.broker import dynamic_configs, topic_configs
from chronik.broker.context import RequestContext
from chronik.protocol import errors
from chronik.security.acl_model import Operation
from chronik.storage.config import TOPIC_CONFIGS, TYPE_LIST

API_KEY = 44
VERSIONS = (0, 1)
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
_OP_NAMES = {APPEND: "APPEND", SUBTRACT: "SUBTRACT"}


class _Refused(Exception):
    def __init__(self, code: int, message: str | None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


async def handle(ctx: RequestContext, request: Any) -> Any:
    responses = []
    for resource in request.resources:
        try:
            denied = topic_configs.refused(ctx, Operation.ALTER_CONFIGS, resource)
            if denied:
                raise _Refused(denied, None)
            set_configs, delete = _changes(ctx, resource)
        except _Refused as refused:
            responses.append(
                ctx.build(
                    "AlterConfigsResourceResponse",
                    error_code=refused.code,
                    error_message=refused.message,
                    resource_type=resource.resource_type,
                    resource_name=resource.resource_name,
                )
            )
            continue
        responses.append(
            await topic_configs.apply(ctx, resource, set_configs, delete, request.validate_only)
        )
    return ctx.build("IncrementalAlterConfigsResponse", throttle_time=0, responses=tuple(responses))


def _changes(ctx: RequestContext, resource: Any) -> tuple[dict[str, str], list[str]]:
    """The resource's operations as (values to set, names to delete)."""
    names = [c.name for c in resource.configs]
    if len(set(names)) != len(names):
        raise _Refused(errors.INVALID_REQUEST, "Error due to duplicate config keys")
    nulls = [c.name for c in resource.configs if c.config_operation != DELETE and c.value is None]
    if nulls:
        raise _Refused(errors.INVALID_REQUEST, "Null value not supported for : " + ", ".join(nulls))
    current: dict[str, str] = {}
    broker = resource.resource_type == topic_configs.BROKER
    if resource.resource_type == topic_configs.TOPIC:
        current = topic_configs.current(ctx.services, resource.resource_name) or {}
    elif broker:
        try:
            dynamic = ctx.services.dynamic
            current = dynamic.stored(dynamic.entity(resource.resource_name))
        except dynamic_configs.Refused as refused:
            raise _Refused(refused.code, refused.message) from None
    set_configs: dict[str, str] = {}
    delete: list[str] = []
    for c in resource.configs:
        op = c.config_operation
        if op == SET:
            set_configs[c.name] = c.value
        elif op == DELETE:
            delete.append(c.name)
        elif op in (APPEND, SUBTRACT):
            set_configs[c.name] = _list_op(op, c.name, c.value, current.get(c.name), broker)
        else:
            raise _Refused(errors.INVALID_REQUEST, f"Unknown operation type {op}")
    return set_configs, delete


def _list_op(op: int, name: str, value: str, override: str | None, broker: bool) -> str:
    """The list after APPEND/SUBTRACT; a broker's list starts from its dynamic config or
    the config's default, as Kafka's ConfigAdminManager.prepareIncrementalConfigs."""
    d = dynamic_configs.key_of(name) if broker else TOPIC_CONFIGS.get(name)
    if d is None or d.type != TYPE_LIST:
        raise _Refused(
            errors.INVALID_CONFIG,
            f"Can't {_OP_NAMES[op]} to key {name} because its type is not LIST.",
        )
    items = _split(override if override is not None else (d.default or ""))
    for item in _split(value):
        if op == APPEND and item not in items:
            items.append(item)
        elif op == SUBTRACT and item in items:
            items.remove(item)
    return ",".join(items)


def _split(value: str) -> list[str]:
    return [p.strip() for p in value.split(",") if p.strip()]
