"""The cluster's client quotas, in ZooKeeper as Kafka's ZooKeeper mode kept them (formats
in znodes.py): the config maps of /config/users/<user>, /config/users/<user>/clients/<id>
and /config/clients/<id> (sanitized names, `<default>` for the defaults), and a
/config/changes/config_change_<seq> notice naming the entity path of each change.

``ZkQuotas`` is the quota manager's source in cluster mode, with the interface of the data
dir's QuotaFile (``quotas``, ``generation``, ``alter``). Every broker reads every entity at
start and watches the notices; a notice for a user or client entity makes it read that
entity again, so a quota altered through any broker applies on all of them. A user's
znode also holds its SCRAM credentials: a change reads the map, changes only the quota
keys and writes it back at the version read (another writer meanwhile: done again), so
the credentials stay as they were, and the quota view never holds them.

Reads that feed the view are serialized by one lock and handed to the event loop in that
order; the view changes only on the loop.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from kazoo.exceptions import NoNodeError
from kazoo.recipe.watchers import ChildrenWatch

from chronik.cluster import znodes
from chronik.cluster.entity_config import update_entity_config
from chronik.cluster.session import ZkSession
from chronik.protocol import errors
from chronik.security.quota_configs import KEYS, apply, parse_path
from chronik.storage.errors import StorageError

log = logging.getLogger("chronik.security")

# How often a read-change-write is tried again when another writer got there first.
ATTEMPTS = 10
# More notices than this at once (a broker that was cut off): read everything again.
FULL_READ_AFTER = 100
# Notices older than this are deleted at start (Kafka's 15 minutes).
NOTICE_EXPIRY_MS = 15 * 60 * 1000


class QuotasChangedMeanwhile(StorageError):
    code = errors.UNKNOWN_SERVER_ERROR


def _quota_keys(config: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in config.items() if k in KEYS}


def read_entity(client: Any, path: str) -> dict[str, str]:
    """The quota keys of one entity (empty: none, or no znode); unreadable counts as empty,
    with a warning."""
    zpath = znodes.entity_config_path(path)
    try:
        data, _ = client.get(zpath)
    except NoNodeError:
        return {}
    try:
        return _quota_keys(znodes.parse_config(data))
    except (ValueError, TypeError, AttributeError) as exc:
        log.warning("ignoring unreadable quota config %s: %s", zpath, exc)
        return {}


def _children(client: Any, path: str) -> list[str]:
    try:
        return list(client.get_children(path))
    except NoNodeError:
        return []


def read_all(client: Any) -> dict[str, dict[str, str]]:
    found: dict[str, dict[str, str]] = {}
    paths = []
    for user in _children(client, znodes.CONFIG_USERS):
        paths.append(f"users/{user}")
        paths.extend(
            f"users/{user}/clients/{c}"
            for c in _children(client, f"{znodes.CONFIG_USERS}/{user}/clients")
        )
    paths.extend(f"clients/{c}" for c in _children(client, znodes.CONFIG_CLIENTS))
    for path in paths:
        config = read_entity(client, path)
        if config:
            found[path] = config
    return found


def write_entity(client: Any, path: str, ops: Mapping[str, str | None]) -> None:
    """Change the quota keys of one entity's config map, keeping its other keys (a user's
    SCRAM credentials), then write Kafka's change notice."""
    if not update_entity_config(client, path, lambda config: apply(config, ops), ATTEMPTS):
        raise QuotasChangedMeanwhile(f"the config of {path} kept changing meanwhile; try again")


class ZkQuotas:
    def __init__(self, session: ZkSession) -> None:
        self.session = session
        self.quotas: dict[str, dict[str, str]] = {}
        self.generation = 0
        self._read_lock = threading.RLock()
        self._last_notice: int | None = None

    async def start(self) -> None:
        """Read every entity and watch the notices; the view holds them on return."""
        await self.session.run(self._install)

    def _install(self) -> None:
        client = self.session.client
        assert client is not None
        client.ensure_path(znodes.CONFIG_CHANGES)
        self._purge_notices(client)
        ChildrenWatch(client, znodes.CONFIG_CHANGES, self._on_children)
        # Read after the watch is set: a change from here on is read again.
        with self._read_lock:
            self.session.to_loop(self._apply, read_all(client), True)

    def _purge_notices(self, client: Any) -> None:
        oldest = time.time_ns() // 1_000_000 - NOTICE_EXPIRY_MS
        for child in _children(client, znodes.CONFIG_CHANGES):
            path = f"{znodes.CONFIG_CHANGES}/{child}"
            try:
                stat = client.exists(path)
                if stat is not None and stat.ctime < oldest:
                    client.delete(path)
            except NoNodeError:
                continue  # another broker purged it

    # -- kazoo threads ---------------------------------------------------------------

    def _on_children(self, children: list[str]) -> None:
        try:
            self._on_notices(children)
        except Exception as exc:  # noqa: BLE001 - the next notice tries again
            log.warning("cannot read the config change notices: %s", exc)

    def _on_notices(self, children: list[str]) -> None:
        prefix = znodes.CONFIG_CHANGE_PREFIX
        numbers = sorted(
            (int(c[len(prefix):]), c)
            for c in children
            if c.startswith(prefix) and c[len(prefix):].isdigit()
        )
        client = self.session.client
        assert client is not None
        with self._read_lock:
            last = self._last_notice
            if last is None:
                # The first listing: what it names is read by the full read that follows.
                self._last_notice = numbers[-1][0] if numbers else -1
                return
            new = [child for number, child in numbers if number > last]
            if not new:
                return
            paths: set[str] | None = set()
            if len(new) > FULL_READ_AFTER:
                paths = None
            else:
                for child in new:
                    try:
                        data, _ = client.get(f"{znodes.CONFIG_CHANGES}/{child}")
                        path = znodes.parse_config_change(data)
                    except NoNodeError:
                        continue  # purged meanwhile
                    except (ValueError, KeyError, TypeError) as exc:
                        log.warning("config change notice %s unreadable (%s): reading every "
                                    "quota", child, exc)
                        paths = None
                        break
                    if parse_path(path) is not None:
                        paths.add(path)
            if paths is None:
                self.session.to_loop(self._apply, read_all(client), True)
            elif paths:
                updates = {path: read_entity(client, path) for path in paths}
                self.session.to_loop(self._apply, updates, False)
            self._last_notice = numbers[-1][0]

    def _write(self, changes: dict[str, dict[str, str | None]]) -> None:
        client = self.session.client
        assert client is not None
        for path, ops in changes.items():
            write_entity(client, path, ops)
        # This broker's view has the change before the request is answered.
        with self._read_lock:
            updates = {path: read_entity(client, path) for path in changes}
            self.session.to_loop(self._apply, updates, False)

    # -- the loop --------------------------------------------------------------------

    def _apply(self, updates: dict[str, dict[str, str]], everything: bool) -> None:
        current = {} if everything else dict(self.quotas)
        for path, config in updates.items():
            if config:
                current[path] = config
            else:
                current.pop(path, None)
        if current != self.quotas:
            self.quotas = current
            self.generation += 1

    async def alter(self, changes: Mapping[str, Mapping[str, str | None]]) -> None:
        """entity path -> key -> value (None: removed). ZooKeeper away: ZooKeeperUnavailable
        (REQUEST_TIMED_OUT)."""
        await self.session.run(self._write, {p: dict(ops) for p, ops in changes.items()})
