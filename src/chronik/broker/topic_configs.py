"""Changing a topic's configs, shared by AlterConfigs and IncrementalAlterConfigs, and
the authorization check of a config resource shared with DescribeConfigs."""

from __future__ import annotations

from typing import Any

from chronik.broker import dynamic_configs
from chronik.broker.context import RequestContext
from chronik.broker.services import Services
from chronik.protocol import errors
from chronik.security.acl_model import Operation, ResourceType
from chronik.storage.config import validate_topic_configs

# Kafka's ConfigResource.Type codes.
TOPIC = 2
BROKER = 4
BROKER_LOGGER = 8
CLIENT_METRICS = 16
GROUP = 32

# Kafka's Errors messages for a refused config resource (DescribeConfigs answers them).
REFUSED_MESSAGES = {
    errors.TOPIC_AUTHORIZATION_FAILED: "Topic authorization failed.",
    errors.CLUSTER_AUTHORIZATION_FAILED: "Cluster authorization failed.",
    errors.GROUP_AUTHORIZATION_FAILED: "Group authorization failed.",
}


def refused(ctx: RequestContext, operation: Operation, resource: Any) -> int:
    """Kafka's check of a config resource for DESCRIBE_CONFIGS or ALTER_CONFIGS: a broker
    (or broker logger, or client metrics) resource on the Cluster, a topic on the Topic, a
    group on the Group. The error code when the principal may not, else 0 (also for a
    type that is not checked, which the caller refuses as it does without ACLs)."""
    kind, name = resource.resource_type, resource.resource_name
    if kind in (BROKER, BROKER_LOGGER, CLIENT_METRICS):
        allowed = ctx.allowed_on_cluster(operation)
        return errors.NONE if allowed else errors.CLUSTER_AUTHORIZATION_FAILED
    if kind == TOPIC:
        allowed = ctx.allowed(operation, ResourceType.TOPIC, name)
        return errors.NONE if allowed else errors.TOPIC_AUTHORIZATION_FAILED
    if kind == GROUP:
        allowed = ctx.allowed(operation, ResourceType.GROUP, name)
        return errors.NONE if allowed else errors.GROUP_AUTHORIZATION_FAILED
    return errors.NONE


def current(broker: Services, name: str) -> dict[str, str] | None:
    """A topic's config overrides (None: no such topic): in a cluster, as ZooKeeper has
    them, since this broker may store none of the topic's partitions."""
    if broker.cluster is not None:
        return broker.cluster.topic_configs(name)
    topic = broker.catalog.get(name)
    return None if topic is None else dict(topic.configs)


async def alter_broker(
    ctx: RequestContext,
    name: str,
    set_configs: dict[str, str],
    delete: list[str],
    validate_only: bool,
    replace: bool,
) -> None:
    """Kafka's dynamic broker configs: this broker's or another live broker's (name: its
    id) or the cluster default (name ""); Refused when Kafka would refuse."""
    dynamic = ctx.services.dynamic
    entity = dynamic.entity(name)
    new = {} if replace else dynamic.stored(entity)
    new.update(set_configs)
    for key in delete:
        new.pop(key, None)
    this_broker = entity == str(ctx.services.node_id)
    dynamic_configs.validate(ctx.services, new, entity != dynamic_configs.DEFAULT_ENTITY,
                             this_broker)
    if not validate_only:
        await dynamic.write(entity, new)
        if this_broker and any(k.startswith(("ssl.", "listener.name.")) for k in set_configs):
            dynamic.apply_tls()  # Kafka reloads the stores even when the names did not change


async def apply(
    ctx: RequestContext,
    resource: Any,
    set_configs: dict[str, str],
    delete: list[str],
    validate_only: bool,
    replace: bool = False,
) -> Any:
    """Apply one resource's changes; returns the kio resource result."""
    code, message = errors.NONE, None
    catalog = ctx.services.catalog
    cluster = ctx.services.cluster
    if resource.resource_type == TOPIC:
        configs = current(ctx.services, resource.resource_name)
        if configs is None:
            code, message = errors.UNKNOWN_TOPIC_OR_PARTITION, "Topic does not exist"
        else:
            try:
                validate_topic_configs(set_configs)
                if replace:
                    delete = [k for k in configs if k not in set_configs]
                if cluster is not None:
                    new = {k: v for k, v in configs.items() if k not in delete}
                    new.update(set_configs)
                    validate_topic_configs(new)
                    if not validate_only:
                        await cluster.set_topic_configs(resource.resource_name, new)
                elif not validate_only:
                    catalog.alter_topic_configs(resource.resource_name, set_configs, delete)
            except Exception as exc:
                code = getattr(exc, "code", None)
                if code is None:
                    raise
                message = str(exc)
    elif resource.resource_type == BROKER:
        try:
            await alter_broker(ctx, resource.resource_name, set_configs, delete, validate_only,
                               replace)
        except dynamic_configs.Refused as refused:
            code, message = refused.code, refused.message
        except Exception as exc:
            code = getattr(exc, "code", None)
            if code is None:
                raise
            message = str(exc)
    else:
        code, message = (
            errors.INVALID_REQUEST,
            f"Unsupported resource type {resource.resource_type}",
        )
    return ctx.build(
        "AlterConfigsResourceResponse",
        error_code=code,
        error_message=message,
        resource_type=resource.resource_type,
        resource_name=resource.resource_name,
    )
