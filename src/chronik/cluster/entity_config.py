"""One change to one of ZooKeeper's /config entities, as Kafka's ZooKeeper mode made it:
the entity's znode (`/config/<entity path>`, format in znodes.py) read, changed and written
back at the version read, then a /config/changes notice naming the entity. Users' SCRAM
credentials and client quotas share these znodes, so each writer keeps the keys it does
not own."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from chronik.cluster import znodes


def update_entity_config(
    client: Any,
    entity_path: str,
    change: Callable[[dict[str, str]], dict[str, str]],
    attempts: int,
) -> bool:
    """Write ``change(config)`` to the entity at the version read; another writer's change
    meanwhile makes the write fail and it is done again on what that wrote, up to
    ``attempts`` times. False when every attempt lost (nothing written, no notice)."""
    zpath = znodes.entity_config_path(entity_path)
    for _ in range(attempts):
        try:
            data, stat = client.get(zpath)
            config, version = znodes.parse_config(data), stat.version
        except NoNodeError:
            config, version = {}, -1
        after = change(config)
        try:
            if version < 0:
                client.create(zpath, znodes.config_value(after), makepath=True)
            else:
                client.set(zpath, znodes.config_value(after), version)
            break
        except (BadVersionError, NodeExistsError):
            continue
    else:
        return False
    client.create(
        f"{znodes.CONFIG_CHANGES}/{znodes.CONFIG_CHANGE_PREFIX}",
        znodes.entity_change_value(entity_path),
        sequence=True,
        makepath=True,
    )
    return True
