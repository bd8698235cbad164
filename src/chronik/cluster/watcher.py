"""ZooKeeper watches that keep a ClusterView current.

Every broker watches the same znodes (brokers, controller, topics, their partition
states and configs, pending deletions and reassignments, users, broker configs) rather
than waiting for the controller's LeaderAndIsr/UpdateMetadata requests: ZooKeeper
already orders and delivers every change to every broker, so no broker-to-broker
protocol is needed for metadata, and
a broker that missed the controller's news (it was restarting) simply reads the znodes.

Each watched znode carries one of ZooKeeper's own one-shot watches, set by reading the
znode and set again by the read its firing sets off (a missing znode is watched with
exists, so that its creation is seen). The reads are asynchronous: kazoo sends them as
they are made, without waiting for the answers, and takes the answers on its completion
thread in the order the reads were sent. There each answer sets off the reads it leads to
(a topic's partition states once its assignment is read) and is handed to the loop, where
the view changes, in that same order. So watching costs no thread per znode, whatever
their number, and reading a cluster of thousands of partitions takes a few round trips
rather than one per znode.

kazoo, unlike ZooKeeper's Java client, does not send SetWatches on a new connection: the
watches of a connection go with it, whether the session outlives the connection or
expires. So once reconnected, everything is read again from the top in one pass, which
also brings whatever changed meanwhile (an unchanged partition state leaves the view as
it is).

Within a connection a watch stays set until it fires, so a topic deleted and created
again under the same name is seen either by the watches on its znodes or by the listing
of /brokers/topics. A name its parent no longer lists (a deleted topic, user or broker
entity) is forgotten: its znodes are not read again when their watches fire, and the
listing brings it back if it is created again.

A read cut short by the session is no error: closed, the broker is stopping; dropped or
expired, the pass that follows the reconnection reads it again. One debug line says so.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import (
    ConnectionClosedError,
    ConnectionLoss,
    NoNodeError,
    SessionExpiredError,
)
from kazoo.protocol.states import EventType, KazooState, KeeperState, WatchedEvent

from chronik.cluster import znodes
from chronik.cluster.session import ZkSession
from chronik.cluster.view import ClusterView, TopicView
from chronik.cluster.znodes import Assignment, BrokerInfo, PartitionState

log = logging.getLogger("chronik.cluster")


class _Pass:
    """One reading of every watched znode from the top. It counts its reads in flight (a
    read's follow-ups are counted before the read itself ends), and is complete once none
    is left, unless one was cut short by the connection."""

    def __init__(self, on_complete: Callable[[], None]) -> None:
        self._lock = threading.Lock()
        # Held by whoever starts the pass until its first reads are sent: an answer that
        # came back before the next read was sent would otherwise end the pass.
        self._pending = 1
        self._cut = False
        self._on_complete = on_complete

    def begin(self) -> None:
        with self._lock:
            self._pending += 1

    def cut(self) -> None:
        with self._lock:
            self._cut = True

    def end(self) -> None:
        with self._lock:
            self._pending -= 1
            complete = self._pending == 0 and not self._cut
        if complete:
            self._on_complete()


Tracker = _Pass | None
DataHandler = Callable[[bytes | None, Any, Tracker], None]
ChildrenHandler = Callable[[list[str], Tracker], None]
# reader(tracker, fan_out): reads a znode; fan_out for a read that takes its turn in the
# window (see WINDOW).
Reader = Callable[[Tracker, bool], None]
Done = Callable[[Any, BaseException | None], None]
# Reads in flight at once, but for those of the roots (/brokers/ids, /controller, the
# listings) and of broker registrations; the others wait here, in order. ZooKeeper answers
# a connection's requests in order, so a read sent behind thousands (a topic's partition
# states) would wait for all of them: a root's watch that fires meanwhile (a broker
# registering) is read at once, behind a window at most.
WINDOW = 256


class _BrokersReading:
    """One listing of /brokers/ids and the registrations it names, handed to the loop as
    one map once every registration is read."""

    def __init__(self, number: int, count: int) -> None:
        self.number = number  # listings are numbered in the order their answers came
        self.left = count
        self.failed = False
        self.brokers: dict[int, BrokerInfo] = {}


class Watcher:
    def __init__(self, session: ZkSession, view: ClusterView) -> None:
        self.session = session
        self.view = view
        # Reentrant: once the client is stopped kazoo calls a read's callback at once, on
        # the thread that made the read, which may hold the lock.
        self._lock = threading.RLock()
        # How to read each watched znode when its watch fires, by path.
        self._readers: dict[str, Reader] = {}
        # Listed names and, per topic, the partitions whose states are watched.
        self._topics: dict[str, set[int]] = {}
        self._users: set[str] = set()
        self._broker_entities: set[str] = set()
        self._installed = False
        self._loaded = False
        self._told_cut = False
        # Fan-out reads: in flight on this connection, and waiting to be sent.
        self._connection = 0
        self._in_flight = 0
        self._waiting: deque[tuple[str, str, bool, Tracker, Done]] = deque()
        # Completion thread only: listings of /brokers/ids answered, and the last handed
        # over, so the last map handed to the loop is of the last listing read.
        self._brokers_listed = 0
        self._brokers_handed = 0
        # Loop only. Configs read before their topic's assignment (the config znode is
        # written first).
        self._early_configs: dict[str, dict[str, str]] = {}
        self._roots: tuple[tuple[str, Reader], ...] = (
            (znodes.BROKER_IDS, self._children_reader(znodes.BROKER_IDS, self._on_brokers)),
            (znodes.CONTROLLER, self._data_reader(znodes.CONTROLLER, self._on_controller)),
            (znodes.DELETE_TOPICS,
             self._children_reader(znodes.DELETE_TOPICS, self._on_deletes)),
            (znodes.TOPICS, self._children_reader(znodes.TOPICS, self._on_topics)),
            (znodes.REASSIGN_PARTITIONS,
             self._data_reader(znodes.REASSIGN_PARTITIONS, self._on_reassignments)),
            (znodes.CONFIG_USERS,
             self._children_reader(znodes.CONFIG_USERS, self._on_users)),
            (znodes.CONFIG_BROKERS,
             self._children_reader(znodes.CONFIG_BROKERS, self._on_broker_entities)),
        )
        self._root_paths = frozenset(path for path, _ in self._roots)

    def install(self) -> None:
        """Read every watched znode, setting its watch, and follow the cluster from then
        on. Any thread; returns once the first reads are sent, without waiting for an
        answer. The view is marked loaded once the first full reading is on the loop."""
        client = self.session.client
        assert client is not None
        client.add_listener(self._on_connection)
        self._installed = True
        self._read_all()

    # -- kazoo threads --------------------------------------------------------------

    def _on_connection(self, state: str) -> None:
        """kazoo's connection thread, which must not block: the reads are sent, their
        answers not waited for."""
        if state != KazooState.CONNECTED or not self._installed:
            return
        with self._lock:
            self._told_cut = False
            # Reads sent before may never be answered (kazoo drops its unsent ones when
            # the session expires), and those waiting would be read twice: the pass
            # below reads everything.
            self._connection += 1
            self._in_flight = 0
            dropped, self._waiting = self._waiting, deque()
        for _, _, _, tracker, _ in dropped:
            if tracker is not None:
                tracker.cut()
                tracker.end()
        # The connection's watches went with the last one (kazoo sets none again).
        self._read_all()

    def _read_all(self) -> None:
        reading = _Pass(self._on_pass_complete)
        for path, reader in self._roots:
            self._watch(path, reader, reading, fan_out=False)
        reading.end()

    def _on_pass_complete(self) -> None:
        if not self._loaded:
            self._loaded = True
            self.session.to_loop(self._mark_loaded)

    def _on_watch(self, event: WatchedEvent) -> None:
        """kazoo's callback thread. An event without a type tells of the connection, not
        of a znode: the pass after the reconnection reads everything."""
        if event.type == EventType.NONE:
            return
        with self._lock:
            reader = self._readers.get(event.path)
        if reader is not None:
            # A topic's deletion fires the watches of its thousands of partition states
            # at once: those reads take their turn in the window, the few roots do not.
            reader(None, event.path not in self._root_paths)

    def _watch(self, path: str, reader: Reader, tracker: Tracker, fan_out: bool = True) -> None:
        with self._lock:
            self._readers[path] = reader
        reader(tracker, fan_out)

    def _data_reader(self, path: str, handle: DataHandler) -> Reader:
        return functools.partial(self._read_data, path, handle)

    def _children_reader(self, path: str, handle: ChildrenHandler) -> Reader:
        return functools.partial(self._read_children, path, handle)

    def _send(
        self, op: str, path: str, watch: bool, tracker: Tracker, done: Done, fan_out: bool
    ) -> None:
        """Send one read (``op`` "get", "exists" or "children"); ``done(value, error)``
        on kazoo's completion thread. A fan-out read waits its turn in the window."""
        if tracker is not None:
            tracker.begin()
        if not fan_out:
            self._transmit(op, path, watch, tracker, done, None)
            return
        with self._lock:
            if self._waiting or self._in_flight >= WINDOW:
                self._waiting.append((op, path, watch, tracker, done))
                return
            self._in_flight += 1
            connection = self._connection
        if not self._transmit(op, path, watch, tracker, done, connection):
            self._release(connection)

    def _release(self, connection: int) -> None:
        """A fan-out read's place is free (answered, or not sent): the next in line."""
        while True:
            with self._lock:
                if connection != self._connection:
                    return  # counted afresh since
                self._in_flight -= 1
                if not self._waiting:
                    return
                op, path, watch, tracker, done = self._waiting.popleft()
                self._in_flight += 1
            if self._transmit(op, path, watch, tracker, done, connection):
                return

    def _transmit(
        self,
        op: str,
        path: str,
        watch: bool,
        tracker: Tracker,
        done: Done,
        connection: int | None,
    ) -> bool:
        """Whether the read was sent. ``connection``: that of a fan-out read, whose
        answer frees its place in the window."""
        client = self.session.client
        if client is None or not client.connected:
            # It would wait for the connection; the pass after the reconnection reads it.
            self._cut_short(path, "disconnected", tracker)
            if tracker is not None:
                tracker.end()
            return False

        def complete(result: Any) -> None:
            try:
                try:
                    value, error = result.get_nowait(), None
                except Exception as exc:  # noqa: BLE001 - handed to done
                    value, error = None, exc
                done(value, error)
            except Exception:
                log.exception("following ZooKeeper's answer about %s failed", path)
            finally:
                if connection is not None:
                    self._release(connection)
                if tracker is not None:
                    tracker.end()

        call = _CALLS[op]
        with self._lock:
            result = call(client, path, self._on_watch if watch else None)
            # Linked before the next read is sent: answers are then taken in the order
            # the reads were sent (kazoo queues a callback when both the answer and the
            # link are there).
            result.rawlink(complete)
        return True

    def _read_data(
        self, path: str, handle: DataHandler, tracker: Tracker, fan_out: bool
    ) -> None:
        """``handle(data, stat, tracker)``, with (None, None) for a missing znode."""

        def got(value: Any, error: BaseException | None) -> None:
            if error is None:
                data, stat = value
                handle(data, stat, tracker)
            elif isinstance(error, NoNodeError):
                self._send("exists", path, True, tracker, missing, fan_out)
            else:
                self._failed(path, error, tracker)

        def missing(stat: Any, error: BaseException | None) -> None:
            if error is not None:
                self._failed(path, error, tracker)
            elif stat is None:
                handle(None, None, tracker)
            else:
                self._read_data(path, handle, tracker, fan_out)  # created since the read

        self._send("get", path, True, tracker, got, fan_out)

    def _read_children(
        self, path: str, handle: ChildrenHandler, tracker: Tracker, fan_out: bool
    ) -> None:
        """``handle(children, tracker)``, with no children for a missing znode."""

        def got(children: Any, error: BaseException | None) -> None:
            if error is None:
                handle(list(children), tracker)
            elif isinstance(error, NoNodeError):
                self._send("exists", path, True, tracker, missing, fan_out)
            else:
                self._failed(path, error, tracker)

        def missing(stat: Any, error: BaseException | None) -> None:
            if error is not None:
                self._failed(path, error, tracker)
            elif stat is None:
                handle([], tracker)
            else:
                self._read_children(path, handle, tracker, fan_out)

        self._send("children", path, True, tracker, got, fan_out)

    def _failed(self, path: str, error: BaseException, tracker: Tracker) -> None:
        if isinstance(error, ConnectionClosedError):
            if tracker is not None:
                tracker.cut()  # closed by this broker's stop
        elif isinstance(error, ConnectionLoss | SessionExpiredError):
            self._cut_short(path, type(error).__name__, tracker)
        else:
            log.warning("reading %s from ZooKeeper failed: %s", path, error)

    def _cut_short(self, path: str, why: str, tracker: Tracker) -> None:
        if tracker is not None:
            tracker.cut()
        client = self.session.client
        if client is None or client.client_state == KeeperState.CLOSED:
            return  # closed by this broker's stop
        with self._lock:
            told, self._told_cut = self._told_cut, True
        if not told:
            log.debug("reading %s cut short (%s); everything is read again once reconnected",
                      path, why)

    # -- what is read, on kazoo's completion thread -----------------------------------

    def _on_brokers(self, children: list[str], tracker: Tracker) -> None:
        ids: list[int] = []
        for child in children:
            try:
                ids.append(int(child))
            except ValueError:
                log.warning("ignoring unreadable broker registration %s", child)
        self._brokers_listed += 1
        reading = _BrokersReading(self._brokers_listed, len(ids))
        if not ids:
            self._hand_over_brokers(reading)
        for node_id in ids:
            path = znodes.broker_path(node_id)
            done = functools.partial(self._on_broker, reading, node_id, path, tracker)
            # Not in the window: a broker's registration read behind a topic's thousands
            # of partition states would leave the view without that broker meanwhile.
            self._send("get", path, False, tracker, done, fan_out=False)

    def _on_broker(
        self,
        reading: _BrokersReading,
        node_id: int,
        path: str,
        tracker: Tracker,
        value: Any,
        error: BaseException | None,
    ) -> None:
        if error is None:
            try:
                reading.brokers[node_id] = znodes.parse_broker(node_id, value[0],
                                                                value[1].czxid)
            except (ValueError, KeyError, TypeError) as exc:
                log.warning("ignoring unreadable broker registration %s: %s", node_id, exc)
        elif not isinstance(error, NoNodeError):  # gone since listed: the next event says so
            reading.failed = True
            self._failed(path, error, tracker)
        reading.left -= 1
        if reading.left == 0 and not reading.failed:
            self._hand_over_brokers(reading)

    def _hand_over_brokers(self, reading: _BrokersReading) -> None:
        if reading.number > self._brokers_handed:
            self._brokers_handed = reading.number
            self.session.to_loop(self._set_brokers, reading.brokers)

    def _on_controller(self, data: bytes | None, stat: Any, tracker: Tracker) -> None:
        self.session.to_loop(self._set_controller, znodes.parse_controller(data))

    def _on_reassignments(self, data: bytes | None, stat: Any, tracker: Tracker) -> None:
        try:
            targets = znodes.parse_reassignments(data)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            # Kafka's controller deletes an unreadable znode; here it is left for the
            # operator, and read again when it changes.
            log.warning("ignoring unreadable %s: %s", znodes.REASSIGN_PARTITIONS, exc)
            targets = {}
        version = stat.version if stat is not None else -1
        self.session.to_loop(self._set_reassignments, targets, version)

    def _on_deletes(self, children: list[str], tracker: Tracker) -> None:
        self.session.to_loop(self._set_deleting, set(children))

    def _on_topics(self, children: list[str], tracker: Tracker) -> None:
        names = set(children)
        with self._lock:
            for gone in set(self._topics) - names:
                self._forget_topic(gone)
            new = names - self._topics.keys()
            for name in new:
                self._topics[name] = set()
        # A pass reads every topic; a change of the listing only the new ones. The config
        # first: a new topic's is written before its assignment.
        for name in sorted(names if tracker is not None else new):
            path = znodes.config_path(name)
            self._watch(path, self._data_reader(path, self._config_handler(name)), tracker)
            path = znodes.topic_path(name)
            handle = functools.partial(self._on_assignment, name)
            self._watch(path, self._data_reader(path, handle), tracker)
        self.session.to_loop(self._set_topic_names, names)

    def _forget_topic(self, name: str) -> None:
        """Under the lock: a topic /brokers/topics no longer lists."""
        for partition in self._topics.pop(name, ()):
            self._readers.pop(znodes.state_path(name, partition), None)
        self._readers.pop(znodes.config_path(name), None)
        self._readers.pop(znodes.topic_path(name), None)

    def _on_assignment(self, name: str, data: bytes | None, stat: Any, tracker: Tracker) -> None:
        if data is None:
            self.session.to_loop(self._drop_topic, name)
            return
        try:
            assignment = znodes.parse_assignment(data)
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("ignoring unreadable assignment of topic %s: %s", name, exc)
            return
        self.session.to_loop(self._set_assignment, name, assignment, stat.version)
        partitions = set(assignment.replicas)
        with self._lock:
            watched = self._topics.get(name)
            if watched is None:
                return  # no longer listed; the listing brings it back if created again
            new = partitions - watched
            if tracker is None:
                watched |= partitions
            else:
                # A pass sets the watches of exactly these: those of a topic created
                # again with fewer partitions while the connection was down are gone.
                for partition in watched - partitions:
                    self._readers.pop(znodes.state_path(name, partition), None)
                self._topics[name] = partitions
        for partition in sorted(partitions if tracker is not None else new):
            path = znodes.state_path(name, partition)
            handle = functools.partial(self._on_state, name, partition)
            self._watch(path, self._data_reader(path, handle), tracker)

    def _on_state(
        self, name: str, partition: int, data: bytes | None, stat: Any, tracker: Tracker
    ) -> None:
        state = None
        if data is not None:
            try:
                state = znodes.parse_state(data, stat.version)
            except (ValueError, KeyError, TypeError) as exc:
                log.warning("ignoring unreadable state of %s-%d: %s", name, partition, exc)
                return
        self.session.to_loop(self._set_state, name, partition, state)

    def _on_users(self, children: list[str], tracker: Tracker) -> None:
        names = set(children)
        with self._lock:
            for gone in self._users - names:
                self._readers.pop(znodes.user_path(gone), None)
            new = names - self._users
            self._users = names
        for name in sorted(names if tracker is not None else new):
            path = znodes.user_path(name)
            self._watch(path, self._data_reader(path, self._config_handler(name, "user")),
                        tracker)
        self.session.to_loop(self._keep_users, names)

    def _on_broker_entities(self, children: list[str], tracker: Tracker) -> None:
        names = set(children)
        with self._lock:
            for gone in self._broker_entities - names:
                self._readers.pop(znodes.broker_config_path(gone), None)
            new = names - self._broker_entities
            self._broker_entities = names
        for name in sorted(names if tracker is not None else new):
            path = znodes.broker_config_path(name)
            handle = self._config_handler(name, "broker")
            self._watch(path, self._data_reader(path, handle), tracker)
        self.session.to_loop(self._keep_broker_configs, names)

    def _config_handler(self, name: str, entity: str = "topic") -> DataHandler:
        """For a `{"version":1,"config":{...}}` znode: a topic's overrides, a user's
        credentials (``entity`` "user"), or a broker's dynamic configs ("broker")."""
        apply = {"user": self._set_user, "broker": self._set_broker_configs}.get(
            entity, self._set_configs
        )

        def on_config(data: bytes | None, stat: Any, tracker: Tracker) -> None:
            try:
                config = znodes.parse_config(data)
            except (ValueError, TypeError, AttributeError) as exc:
                log.warning("ignoring unreadable config of %s %s: %s", entity, name, exc)
                return
            self.session.to_loop(apply, name, config)

        return on_config

    # -- the loop --------------------------------------------------------------------

    def _mark_loaded(self) -> None:
        self.view.loaded = True
        self.view.changed()

    def _set_brokers(self, brokers: dict[int, BrokerInfo]) -> None:
        self.view.brokers = brokers
        self.view.changed()

    def _set_controller(self, controller_id: int) -> None:
        self.view.controller_id = controller_id
        self.view.changed()

    def _set_reassignments(self, targets: dict[tuple[str, int], list[int]], version: int) -> None:
        self.view.reassign_requests = targets
        self.view.reassign_version = version
        self.view.changed()

    def _set_deleting(self, names: set[str]) -> None:
        self.view.deleting = names
        self.view.changed()

    def _set_topic_names(self, names: set[str]) -> None:
        for gone in set(self.view.topics) - names:
            del self.view.topics[gone]
        self.view.changed()

    def _drop_topic(self, name: str) -> None:
        if self.view.topics.pop(name, None) is not None:
            self.view.changed()

    def _set_assignment(self, name: str, assignment: Assignment, version: int) -> None:
        topic = self.view.topics.get(name)
        if topic is None or topic.assignment.topic_id != assignment.topic_id:
            # A topic created again while the connection was down replaces the old one
            # with the configs read just before (the config znode is read first).
            configs = self._early_configs.pop(name, None)
            if configs is None:
                configs = topic.configs if topic is not None else {}
            topic = TopicView(name, assignment, version, configs=configs)
            self.view.topics[name] = topic
        elif topic.assignment == assignment and topic.zk_version == version:
            return  # read again after a reconnection, unchanged
        else:
            topic.set_assignment(assignment, version)
        self.view.changed()

    def _set_state(self, name: str, partition: int, state: PartitionState | None) -> None:
        topic = self.view.topics.get(name)
        if topic is None or topic.states.get(partition) == state:
            return
        topic.set_state(partition, state)
        self.view.changed()

    def _set_user(self, name: str, config: dict[str, str]) -> None:
        if config:
            self.view.users[name] = config
        else:
            self.view.users.pop(name, None)
        self.view.changed()

    def _keep_users(self, names: set[str]) -> None:
        """Users /config/users no longer lists (deleted while the connection was down)."""
        gone = set(self.view.users) - names
        for name in gone:
            del self.view.users[name]
        if gone:
            self.view.changed()

    def _set_broker_configs(self, name: str, config: dict[str, str]) -> None:
        if config:
            self.view.broker_configs[name] = config
        else:
            self.view.broker_configs.pop(name, None)
        self.view.changed()

    def _keep_broker_configs(self, names: set[str]) -> None:
        gone = set(self.view.broker_configs) - names
        for name in gone:
            del self.view.broker_configs[name]
        if gone:
            self.view.changed()

    def _set_configs(self, name: str, configs: dict[str, str]) -> None:
        topic = self.view.topics.get(name)
        if topic is None:
            self._early_configs[name] = configs
            return
        if topic.configs != configs:
            topic.configs = configs
            self.view.changed()


_CALLS: dict[str, Callable[[KazooClient, str, Any], Any]] = {
    "get": lambda client, path, watch: client.get_async(path, watch=watch),
    "exists": lambda client, path, watch: client.exists_async(path, watch=watch),
    "children": lambda client, path, watch: client.get_children_async(path, watch=watch),
}
