"""SCRAM users in ZooKeeper, as Kafka's ZooKeeper mode kept them (format in znodes.py:
/config/users/<user> and a /config/changes notice per change). Shared by the brokers
(AlterUserScramCredentials) and `chronik users --zookeeper`; both go through a kazoo
client on the cluster's chroot."""

from __future__ import annotations

from typing import Any

from kazoo.exceptions import BadVersionError, NoNodeError

from chronik.cluster import znodes
from chronik.cluster.entity_config import update_entity_config
from chronik.security.scram import MECHANISMS

# How often a read-change-write is tried again when another writer got there first.
ATTEMPTS = 5


def read_user(client: Any, user: str) -> tuple[dict[str, str], int]:
    """The user's mechanism -> credential strings, and the znode version (-1: none)."""
    try:
        data, stat = client.get(znodes.user_path(user))
    except NoNodeError:
        return {}, -1
    return znodes.parse_config(data), stat.version


def read_users(client: Any) -> dict[str, dict[str, str]]:
    try:
        names = client.get_children(znodes.CONFIG_USERS)
    except NoNodeError:
        return {}
    # A user's znode may also hold its client quotas: only the credentials are read here.
    found = {
        name: {m: t for m, t in read_user(client, name)[0].items() if m in MECHANISMS}
        for name in names
    }
    return {name: config for name, config in found.items() if config}


def write_users(client: Any, changes: list[tuple[str, str, str | None]]) -> None:
    """(user, mechanism, credential string or None to remove), each user's znode changed
    at the version read (cluster/entity_config.py); the znode's other keys (the user's
    client quotas) are kept. BadVersionError when other writers kept winning."""
    for user in dict.fromkeys(user for user, _, _ in changes):

        def change(config: dict[str, str], user: str = user) -> dict[str, str]:
            for name, mechanism, text in changes:
                if name != user:
                    continue
                if text is None:
                    config.pop(mechanism, None)
                else:
                    config[mechanism] = text
            return config

        if not update_entity_config(client, f"users/{user}", change, ATTEMPTS):
            raise BadVersionError()
