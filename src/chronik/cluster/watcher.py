"""ZooKeeper watches that keep a ClusterView current.

Every broker watches the same znodes (brokers, controller, topics, their partition
states and configs, pending deletions) rather than waiting for the controller's
LeaderAndIsr/UpdateMetadata requests: ZooKeeper already orders and delivers every change
to every broker, so no broker-to-broker protocol is needed for metadata, and a broker
that missed the controller's news (it was restarting) simply reads the znodes.

Watches are set once per znode path and never removed: a topic deleted and created again
under the same name is seen by the same watches.

A callback that reads more znodes fails when the session drops or closes meanwhile. That
is no error: closed, the broker is stopping; dropped, what it was reading is read again
once the session is back (kazoo's watches do not call again for an unchanged listing).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from kazoo.exceptions import (
    ConnectionClosedError,
    ConnectionLoss,
    NoNodeError,
    SessionExpiredError,
)
from kazoo.protocol.states import KazooState
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from chronik.cluster import znodes
from chronik.cluster.session import ZkSession
from chronik.cluster.view import ClusterView, TopicView
from chronik.cluster.znodes import Assignment, BrokerInfo, PartitionState

log = logging.getLogger("chronik.cluster")


class Watcher:
    def __init__(self, session: ZkSession, view: ClusterView) -> None:
        self.session = session
        self.view = view
        self._lock = threading.Lock()  # the sets below are touched from kazoo's threads
        self._topic_watches: set[str] = set()
        self._state_watches: set[tuple[str, int]] = set()
        self._user_watches: set[str] = set()
        self._broker_config_watches: set[str] = set()
        # Configs read before their topic's assignment (the config znode is written first).
        self._early_configs: dict[str, dict[str, str]] = {}
        # Readings cut short by a dropped connection, by znode path: done again on reconnect.
        self._again: dict[str, Callable[[], None]] = {}
        # One reading of /brokers/ids handed to the loop at a time, so the last one handed
        # over is the last one read (a reading done again races the watch's own).
        self._brokers_lock = threading.Lock()

    def install(self) -> None:
        """On a kazoo thread. When this returns, the first reading of every znode is queued
        for the loop; a last callback then marks the view loaded."""
        client = self.session.client
        assert client is not None
        client.add_listener(self._on_connection)
        ChildrenWatch(client, znodes.BROKER_IDS, self._children(znodes.BROKER_IDS,
                                                                self._on_brokers))
        DataWatch(client, znodes.CONTROLLER, self._on_controller)
        ChildrenWatch(client, znodes.DELETE_TOPICS, self._on_deletes)
        ChildrenWatch(client, znodes.TOPICS, self._children(znodes.TOPICS, self._on_topics))
        ChildrenWatch(client, znodes.CONFIG_USERS,
                      self._children(znodes.CONFIG_USERS, self._on_users))
        ChildrenWatch(client, znodes.CONFIG_BROKERS,
                      self._children(znodes.CONFIG_BROKERS, self._on_broker_configs))
        self.session.to_loop(self._mark_loaded)

    # -- kazoo threads --------------------------------------------------------------

    def _guarded(self, path: str, read: Callable[[], None], again: Callable[[], None]) -> None:
        """``read()``; if the session drops meanwhile, ``again()`` once it is back."""
        try:
            read()
        except ConnectionClosedError:
            return  # closed by this broker's stop
        except (ConnectionLoss, SessionExpiredError) as exc:
            log.debug("reading %s cut short (%s); again once reconnected",
                      path, type(exc).__name__)
            with self._lock:
                self._again[path] = again
            client = self.session.client
            if client is not None and client.connected:
                self._on_connection(KazooState.CONNECTED)  # back before this was noted

    def _children(
        self, path: str, handle: Callable[[list[str]], None]
    ) -> Callable[[list[str]], None]:
        """A ChildrenWatch function for ``path`` that reads more znodes in ``handle``."""

        def again() -> None:
            client = self.session.client
            assert client is not None
            handle(client.get_children(path))

        def on_children(children: list[str]) -> None:
            self._guarded(path, lambda: handle(children), again)

        return on_children

    def _on_connection(self, state: str) -> None:
        """kazoo's connection thread, which must not block: readings go to a thread."""
        if state != KazooState.CONNECTED:
            return
        with self._lock:
            pending, self._again = self._again, {}
        client = self.session.client
        for path, again in pending.items():
            if client is not None:
                client.handler.spawn(self._guarded, path, again, again)

    def _on_brokers(self, children: list[str]) -> None:
        client = self.session.client
        assert client is not None
        with self._brokers_lock:
            brokers: dict[int, BrokerInfo] = {}
            for child in children:
                try:
                    node_id = int(child)
                    data, _ = client.get(znodes.broker_path(node_id))
                    brokers[node_id] = znodes.parse_broker(node_id, data)
                except NoNodeError:
                    continue  # gone since the list was read; the next event says so
                except (ValueError, KeyError, TypeError) as exc:
                    log.warning("ignoring unreadable broker registration %s: %s", child, exc)
            self.session.to_loop(self._set_brokers, brokers)

    def _on_controller(self, data: bytes | None, stat: Any) -> None:
        self.session.to_loop(self._set_controller, znodes.parse_controller(data))

    def _on_deletes(self, children: list[str]) -> None:
        self.session.to_loop(self._set_deleting, set(children))

    def _on_topics(self, children: list[str]) -> None:
        client = self.session.client
        assert client is not None
        for name in children:
            with self._lock:
                if name in self._topic_watches:
                    continue
                self._topic_watches.add(name)
            DataWatch(client, znodes.config_path(name), self._config_callback(name))
            DataWatch(client, znodes.topic_path(name), self._topic_callback(name))
        self.session.to_loop(self._set_topic_names, set(children))

    def _on_users(self, children: list[str]) -> None:
        client = self.session.client
        assert client is not None
        for name in children:
            with self._lock:
                if name in self._user_watches:
                    continue
                self._user_watches.add(name)
            DataWatch(client, znodes.user_path(name), self._config_callback(name, "user"))

    def _on_broker_configs(self, children: list[str]) -> None:
        client = self.session.client
        assert client is not None
        for name in children:
            with self._lock:
                if name in self._broker_config_watches:
                    continue
                self._broker_config_watches.add(name)
            DataWatch(client, znodes.broker_config_path(name),
                      self._config_callback(name, "broker"))

    def _topic_callback(self, name: str) -> Any:
        path = znodes.topic_path(name)

        def on_change(data: bytes | None, stat: Any) -> None:
            if data is None:
                self.session.to_loop(self._drop_topic, name)
                return
            try:
                assignment = znodes.parse_assignment(data)
            except (ValueError, KeyError, TypeError) as exc:
                log.warning("ignoring unreadable assignment of topic %s: %s", name, exc)
                return
            self.session.to_loop(self._set_assignment, name, assignment, stat.version)
            self._guarded(path, lambda: self._watch_states(name, assignment), again)

        def again() -> None:
            client = self.session.client
            assert client is not None
            try:
                data, stat = client.get(path)
            except NoNodeError:
                data, stat = None, None
            on_change(data, stat)

        return on_change

    def _watch_states(self, name: str, assignment: Assignment) -> None:
        client = self.session.client
        assert client is not None
        for partition in assignment.replicas:
            with self._lock:
                if (name, partition) in self._state_watches:
                    continue
                self._state_watches.add((name, partition))
            DataWatch(client, znodes.state_path(name, partition),
                      self._state_callback(name, partition))

    def _state_callback(self, name: str, partition: int) -> Any:
        def on_change(data: bytes | None, stat: Any) -> None:
            state = None
            if data is not None:
                try:
                    state = znodes.parse_state(data, stat.version)
                except (ValueError, KeyError, TypeError) as exc:
                    log.warning("ignoring unreadable state of %s-%d: %s", name, partition, exc)
                    return
            self.session.to_loop(self._set_state, name, partition, state)

        return on_change

    def _config_callback(self, name: str, entity: str = "topic") -> Any:
        """For a `{"version":1,"config":{...}}` znode: a topic's overrides, a user's
        credentials (``entity`` "user"), or a broker's dynamic configs ("broker")."""
        apply = {"user": self._set_user, "broker": self._set_broker_configs}.get(
            entity, self._set_configs
        )

        def on_change(data: bytes | None, stat: Any) -> None:
            try:
                config = znodes.parse_config(data)
            except (ValueError, TypeError, AttributeError) as exc:
                log.warning("ignoring unreadable config of %s %s: %s", entity, name, exc)
                return
            self.session.to_loop(apply, name, config)

        return on_change

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
            pending = self._early_configs.pop(name, {})
            topic = TopicView(name, assignment, version, configs=pending)
            self.view.topics[name] = topic
        else:
            topic.assignment = assignment
            topic.zk_version = version
        for partition in list(topic.states):
            if partition not in assignment.replicas:
                del topic.states[partition]
        self.view.changed()

    def _set_state(self, name: str, partition: int, state: PartitionState | None) -> None:
        topic = self.view.topics.get(name)
        if topic is None:
            return
        if state is None:
            topic.states.pop(partition, None)
        else:
            topic.states[partition] = state
        self.view.changed()

    def _set_user(self, name: str, config: dict[str, str]) -> None:
        if config:
            self.view.users[name] = config
        else:
            self.view.users.pop(name, None)
        self.view.changed()

    def _set_broker_configs(self, name: str, config: dict[str, str]) -> None:
        if config:
            self.view.broker_configs[name] = config
        else:
            self.view.broker_configs.pop(name, None)
        self.view.changed()

    def _set_configs(self, name: str, configs: dict[str, str]) -> None:
        topic = self.view.topics.get(name)
        if topic is None:
            self._early_configs[name] = configs
            return
        if topic.configs != configs:
            topic.configs = configs
            self.view.changed()
