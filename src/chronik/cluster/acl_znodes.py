"""The cluster's ACLs, in ZooKeeper as Kafka's ZooKeeper mode kept them (formats in
znodes.py): one znode per resource under /kafka-acl/<Type>/<name> (LITERAL) or
/kafka-acl-extended/prefixed/<Type>/<name> (PREFIXED), and a sequential change notice
under /kafka-acl-changes or /kafka-acl-extended-changes naming each resource changed.

``ZkAcls`` is the authorizer's source in cluster mode, with the interface of the data
dir's AclFile (``acls``, ``generation``, ``change``). Every broker reads all the
resources at start and watches both notice znodes; a notice makes it read the resource
named again, so a change made through any broker applies on all of them. ``change``
reads the resources it touches and writes them back, with the notices, in one ZooKeeper
transaction checked against the versions read: all or nothing, and done again on fresh
data when another writer got there first. A resource left without bindings loses its
znode, as with Kafka.

Reads that feed the view are serialized by one lock and handed to the event loop in
that order, so the view never goes back to an older reading; the view changes only on
the loop.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Iterable
from typing import Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, RolledBackError
from kazoo.recipe.watchers import ChildrenWatch

from chronik.cluster import znodes
from chronik.cluster.session import ZkSession
from chronik.protocol import errors
from chronik.security.acl_model import (
    RESOURCE_NAMES,
    Acl,
    AclFilter,
    PatternType,
    ResourceType,
)
from chronik.security.acl_store import apply_changes, entry_from_json, entry_json
from chronik.storage.errors import StorageError

log = logging.getLogger("chronik.security")

# (resource type, name, pattern): one znode.
Resource = tuple[ResourceType, str, PatternType]

# Kafka's AclAuthorizer gives up after this many writes refused for a concurrent change.
ATTEMPTS = 10
# More notices than this at once (a broker that was cut off): read everything again.
FULL_READ_AFTER = 100
# Notices older than this are deleted at start (Kafka's 15 minutes).
NOTICE_EXPIRY_MS = 15 * 60 * 1000
# What ZooKeeper refuses in a path element (PathUtils.validatePath), and what would
# make the name a path of several elements.
_UNSTORABLE = re.compile("[\x00-\x1f\x7f-\x9f/\ud800-\uf8ff\ufff0-\uffff]")
_TYPE_BY_PATH = {name: rtype for rtype, name in RESOURCE_NAMES.items()}


class AclsChangedMeanwhile(StorageError):
    """Other writers kept changing the same resources; Kafka answers this way too."""

    code = errors.UNKNOWN_SERVER_ERROR


class AclNameRefused(StorageError):
    """A resource name that cannot be a ZooKeeper path element."""

    code = errors.INVALID_REQUEST


def resource_of(acl: Acl) -> Resource:
    return acl.resource_type, acl.name, acl.pattern


def resource_path(resource: Resource) -> str:
    rtype, name, pattern = resource
    return znodes.acl_path(RESOURCE_NAMES[rtype], name, pattern is PatternType.PREFIXED)


def notice_value(resource: Resource) -> bytes:
    rtype, name, pattern = resource
    return znodes.acl_change_value(rtype.name, name, pattern.name)


def check_storable(name: str) -> None:
    if name in (".", "..") or _UNSTORABLE.search(name):
        raise AclNameRefused(f"the resource name {name!r} cannot be stored in ZooKeeper")


def read_resource(client: Any, resource: Resource) -> tuple[tuple[Acl, ...], int]:
    """The resource's bindings and its znode version (-1: no znode). An unreadable znode
    counts as empty, with a warning (a change overwrites it)."""
    path = resource_path(resource)
    try:
        data, stat = client.get(path)
    except NoNodeError:
        return (), -1
    try:
        entries = znodes.parse_acls(data)
        acls = tuple(dict.fromkeys(entry_from_json(resource, e) for e in entries))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        log.warning("ignoring unreadable ACL znode %s: %s", path, exc)
        acls = ()
    return acls, stat.version


def read_all(client: Any) -> dict[Resource, tuple[Acl, ...]]:
    found: dict[Resource, tuple[Acl, ...]] = {}
    for pattern in (PatternType.LITERAL, PatternType.PREFIXED):
        root = znodes.acl_root(pattern is PatternType.PREFIXED)
        try:
            type_names = client.get_children(root)
        except NoNodeError:
            continue
        for type_name in type_names:
            rtype = _TYPE_BY_PATH.get(type_name)
            if rtype is None:
                log.warning("ignoring ACLs of unknown resource type %s/%s", root, type_name)
                continue
            try:
                names = client.get_children(f"{root}/{type_name}")
            except NoNodeError:
                continue
            for name in names:
                resource = (rtype, name, pattern)
                acls, _ = read_resource(client, resource)
                if acls:
                    found[resource] = acls
    return found


def ensure_paths(client: Any) -> None:
    """What Kafka's authorizer creates at start: both roots, a znode per resource type
    under each, and both notice znodes."""
    for prefixed in (False, True):
        for type_name in znodes.ACL_RESOURCE_TYPES:
            client.ensure_path(f"{znodes.acl_root(prefixed)}/{type_name}")
        client.ensure_path(znodes.acl_changes_path(prefixed))


def _resource_named(rtype: str, name: str, pattern: str) -> Resource:
    return ResourceType[rtype], name, PatternType[pattern]


class ZkAcls:
    """The bindings of every resource, kept current from ZooKeeper; ``generation``
    counts the changes seen, for the authorizer's cache."""

    def __init__(self, session: ZkSession) -> None:
        self.session = session
        self.acls: tuple[Acl, ...] = ()
        self.generation = 0
        self._by_resource: dict[Resource, tuple[Acl, ...]] = {}
        self._read_lock = threading.RLock()
        # notice znode -> the last sequence number read (absent: not listed yet)
        self._last_notice: dict[str, int] = {}

    # -- start ---------------------------------------------------------------------

    async def start(self) -> None:
        """Read every resource and watch the notices; the view holds them on return."""
        await self.session.run(self._install)

    def _install(self) -> None:
        client = self.session.client
        assert client is not None
        ensure_paths(client)
        for prefixed in (False, True):
            path = znodes.acl_changes_path(prefixed)
            self._purge_notices(client, path)
            ChildrenWatch(client, path, self._notice_callback(path, prefixed))
        # Read after the watches are set: a change from here on is read again.
        with self._read_lock:
            self.session.to_loop(self._apply, read_all(client), True)

    def _purge_notices(self, client: Any, path: str) -> None:
        oldest = time.time_ns() // 1_000_000 - NOTICE_EXPIRY_MS
        for child in client.get_children(path):
            try:
                stat = client.exists(f"{path}/{child}")
                if stat is not None and stat.ctime < oldest:
                    client.delete(f"{path}/{child}")
            except NoNodeError:
                continue  # another broker purged it

    # -- kazoo threads ---------------------------------------------------------------

    def _notice_callback(self, path: str, prefixed: bool) -> Any:
        def on_children(children: list[str]) -> None:
            try:
                self._on_notices(path, prefixed, children)
            except Exception as exc:  # noqa: BLE001 - the next notice tries again
                log.warning("cannot read the ACL change notices in %s: %s", path, exc)

        return on_children

    def _on_notices(self, path: str, prefixed: bool, children: list[str]) -> None:
        numbers = sorted(
            (int(c[len(znodes.ACL_CHANGE_PREFIX):]), c)
            for c in children
            if c.startswith(znodes.ACL_CHANGE_PREFIX)
            and c[len(znodes.ACL_CHANGE_PREFIX):].isdigit()
        )
        client = self.session.client
        assert client is not None
        with self._read_lock:
            last = self._last_notice.get(path)
            if last is None:
                # The first listing: what it names is read by the full read that follows.
                self._last_notice[path] = numbers[-1][0] if numbers else -1
                return
            new = [child for number, child in numbers if number > last]
            if not new:
                return
            resources: set[Resource] | None = set()
            if len(new) > FULL_READ_AFTER:
                resources = None
            else:
                for child in new:
                    try:
                        data, _ = client.get(f"{path}/{child}")
                        resources.add(_resource_named(*znodes.parse_acl_change(data, prefixed)))
                    except (NoNodeError, ValueError, KeyError, TypeError) as exc:
                        log.warning("ACL change notice %s/%s unreadable (%s): reading "
                                    "every ACL", path, child, exc)
                        resources = None
                        break
            if resources is None:
                self.session.to_loop(self._apply, read_all(client), True)
            else:
                updates = {r: read_resource(client, r)[0] for r in resources}
                self.session.to_loop(self._apply, updates, False)
            self._last_notice[path] = max(number for number, _ in numbers)

    def _write(
        self, add: list[Acl], remove: list[AclFilter], targets: set[Resource]
    ) -> list[list[Acl]]:
        client = self.session.client
        assert client is not None
        for resource in targets:
            client.ensure_path(resource_path(resource).rpartition("/")[0])
        for _ in range(ATTEMPTS):
            removed: list[list[Acl]] = [[] for _ in remove]
            txn = client.transaction()
            changed: list[Resource] = []
            for resource in sorted(targets, key=resource_path):
                acls, version = read_resource(client, resource)
                added = [acl for acl in add if resource_of(acl) == resource]
                after, gone = apply_changes(acls, added, remove)
                for found, matched in zip(removed, gone, strict=True):
                    found.extend(matched)
                if after == list(acls):
                    continue
                changed.append(resource)
                path = resource_path(resource)
                if not after:
                    txn.delete(path, version)
                elif version < 0:
                    txn.create(path, znodes.acls_value([entry_json(a) for a in after]))
                else:
                    txn.set_data(path, znodes.acls_value([entry_json(a) for a in after]), version)
            if not changed:
                return removed
            for resource in changed:
                prefixed = resource[2] is PatternType.PREFIXED
                txn.create(
                    f"{znodes.acl_changes_path(prefixed)}/{znodes.ACL_CHANGE_PREFIX}",
                    notice_value(resource),
                    sequence=True,
                )
            results = txn.commit()
            failures = [
                r for r in results if isinstance(r, Exception)
                and not isinstance(r, RolledBackError)
            ]
            if not failures:
                # This broker's view has the change before the request is answered.
                with self._read_lock:
                    updates = {r: read_resource(client, r)[0] for r in changed}
                    self.session.to_loop(self._apply, updates, False)
                return removed
            if not isinstance(failures[0], (BadVersionError, NodeExistsError, NoNodeError)):
                raise failures[0]
        raise AclsChangedMeanwhile(
            f"the ACLs of {len(targets)} resource(s) kept changing meanwhile; try again"
        )

    # -- the loop --------------------------------------------------------------------

    def _apply(self, updates: dict[Resource, tuple[Acl, ...]], everything: bool) -> None:
        if everything:
            current = {r: acls for r, acls in updates.items() if acls}
        else:
            current = dict(self._by_resource)
            for resource, acls in updates.items():
                if acls:
                    current[resource] = acls
                else:
                    current.pop(resource, None)
        if current == self._by_resource:
            return
        self._by_resource = current
        self.acls = tuple(acl for acls in current.values() for acl in acls)
        self.generation += 1

    async def change(self, add: list[Acl], remove: list[AclFilter]) -> list[list[Acl]]:
        """Add and remove in one ZooKeeper transaction, all or none; returns what each
        filter removed. ZooKeeper away: ZooKeeperUnavailable (REQUEST_TIMED_OUT)."""
        for acl in add:
            check_storable(acl.name)
        targets = {resource_of(acl) for acl in add}
        targets.update(_matching(self._by_resource.items(), remove))
        if not targets:
            return [[] for _ in remove]
        return await self.session.run(self._write, list(add), list(remove), targets)


def _matching(
    resources: Iterable[tuple[Resource, tuple[Acl, ...]]], remove: list[AclFilter]
) -> set[Resource]:
    """The resources holding a binding some filter matches (as Kafka, from the view)."""
    return {
        resource
        for resource, acls in resources
        if any(selector.matches(acl) for selector in remove for acl in acls)
    }
