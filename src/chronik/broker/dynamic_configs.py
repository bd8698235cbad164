"""Kafka's dynamic broker configs (KIP-226): AlterConfigs and IncrementalAlterConfigs on a
BROKER resource, named by a broker id (that broker's own configs) or "" (the cluster-wide
default), as Kafka's DynamicBrokerConfig takes them.

A value is resolved as Kafka resolves it: the broker's own dynamic config, then the
cluster default, then the static setting (`--set`, server.properties), then Kafka's
default. Only the configs Kafka updates dynamically are accepted (its AllDynamicConfigs);
a static one is refused with INVALID_REQUEST, a bad value with INVALID_CONFIG.

Where they are kept:
- a single node: `<data dir>/dynamic-broker-configs.json`, replaced whole on each
  change: `{"version":1,"brokers":{"<default>":{name: value},"<id>":{name: value}}}`
  (file mode 0600: password configs are kept as given);
- a cluster: ZooKeeper's `/config/brokers/<id>` and `/config/brokers/<default>`, as Kafka's
  ZooKeeper mode keeps them (chronik.cluster.znodes), followed by every broker.

What takes effect at once: the `log.*` topic defaults (and message.max.bytes,
compression.type, min.insync.replicas, producer.id.expiration.ms) for every topic without
its own override; max.connections, max.connections.per.ip(.overrides); ssl.* (the TLS
context is built again); in a cluster, leader.replication.throttled.rate and
follower.replication.throttled.rate (chronik.cluster.replication_quota follows them in the
cluster view). The others are stored and described but change nothing here.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from chronik.protocol import errors
from chronik.storage.config import (
    SOURCE_DEFAULT,
    SOURCE_DYNAMIC_BROKER,
    SOURCE_DYNAMIC_DEFAULT_BROKER,
    SOURCE_STATIC_BROKER,
    TOPIC_CONFIGS,
    TYPE_BOOLEAN,
    TYPE_DOUBLE,
    TYPE_INT,
    TYPE_LIST,
    TYPE_LONG,
    TYPE_SHORT,
    TYPE_STRING,
    ConfigEntry,
    ConfigSynonym,
)

log = logging.getLogger("chronik.config")

TYPE_CLASS = 8
TYPE_PASSWORD = 9
DEFAULT_ENTITY = "<default>"  # Kafka's ZooKeeper name of the cluster default
FILE_NAME = "dynamic-broker-configs.json"

# What a change does here.
LOG, CONNECTIONS, TLS, NONE = "log", "connections", "tls", ""
REPLICATION = "replication"  # applied by the cluster's replication quotas


class Key(NamedTuple):
    type: int
    default: str | None
    effect: str = NONE
    per_broker: bool = False  # Kafka's PerBrokerConfigs: not at the cluster default
    check: Callable[[Any], bool] | None = None
    expect: str = ""


class Refused(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _at_least(n: float) -> Callable[[Any], bool]:
    return lambda v: v >= n


DYNAMIC: dict[str, Key] = {}

# DynamicLogConfig: the broker name of every topic config (Kafka's TopicConfigSynonyms),
# but log.message.format.version.
for _d in TOPIC_CONFIGS.values():
    if _d.synonyms and _d.synonyms[0].name != "log.message.format.version":
        DYNAMIC[_d.synonyms[0].name] = Key(
            _d.type, _d.default, LOG if _d.attr else NONE, False, _d.check, _d.expect
        )
# DynamicProducerStateManagerConfig.
DYNAMIC["producer.id.expiration.ms"] = Key(TYPE_INT, "86400000", LOG, False, _at_least(1), ">= 1")
DYNAMIC["transaction.partition.verification.enable"] = Key(TYPE_BOOLEAN, "true")
# LogCleaner's reconfigurable configs.
DYNAMIC.update({
    "log.cleaner.threads": Key(TYPE_INT, "1", NONE, False, _at_least(0), ">= 0"),
    "log.cleaner.dedupe.buffer.size": Key(TYPE_LONG, "134217728"),
    "log.cleaner.io.buffer.load.factor": Key(TYPE_DOUBLE, "0.9"),
    "log.cleaner.io.buffer.size": Key(TYPE_INT, "524288", NONE, False, _at_least(0), ">= 0"),
    "log.cleaner.io.max.bytes.per.second": Key(TYPE_DOUBLE, "1.7976931348623157E308"),
    "log.cleaner.backoff.ms": Key(TYPE_LONG, "15000", NONE, False, _at_least(0), ">= 0"),
})
# DynamicThreadPool (and the network threads of DynamicListenerConfig).
THREAD_POOLS = {"num.io.threads": "8", "num.replica.fetchers": "1",
                "num.recovery.threads.per.data.dir": "1", "background.threads": "10",
                "num.network.threads": "3"}
for _name, _default in THREAD_POOLS.items():
    DYNAMIC[_name] = Key(TYPE_INT, _default, NONE, False, _at_least(1), ">= 1")
DYNAMIC["metric.reporters"] = Key(TYPE_LIST, "")
# Connection limits (DynamicListenerConfig, SocketServer).
DYNAMIC.update({
    "max.connections": Key(TYPE_INT, "2147483647", CONNECTIONS, False, _at_least(0), ">= 0"),
    "max.connections.per.ip": Key(TYPE_INT, "2147483647", CONNECTIONS, False, _at_least(0),
                                  ">= 0"),
    "max.connections.per.ip.overrides": Key(TYPE_STRING, "", CONNECTIONS),
    "max.connection.creation.rate": Key(TYPE_INT, "2147483647", NONE, False, _at_least(0),
                                        ">= 0"),
})
# Replication quotas (Kafka's DynamicConfig.Broker).
for _name in ("leader.replication.throttled.rate", "follower.replication.throttled.rate",
              "replica.alter.log.dirs.io.max.bytes.per.second"):
    _effect = NONE if _name.startswith("replica.") else REPLICATION
    DYNAMIC[_name] = Key(TYPE_LONG, str(2**63 - 1), _effect, False, _at_least(0), ">= 0")
# SslConfigs.RECONFIGURABLE_CONFIGS: only per listener (listener.name.<l>.ssl...).
SECURITY = {
    "ssl.keystore.type": Key(TYPE_STRING, "JKS", TLS, True),
    "ssl.keystore.location": Key(TYPE_STRING, None, TLS, True),
    "ssl.keystore.password": Key(TYPE_PASSWORD, None, TLS, True),
    "ssl.key.password": Key(TYPE_PASSWORD, None, TLS, True),
    "ssl.keystore.key": Key(TYPE_PASSWORD, None, TLS, True),
    "ssl.keystore.certificate.chain": Key(TYPE_PASSWORD, None, TLS, True),
    "ssl.truststore.type": Key(TYPE_STRING, "JKS", TLS, True),
    "ssl.truststore.location": Key(TYPE_STRING, None, TLS, True),
    "ssl.truststore.password": Key(TYPE_PASSWORD, None, TLS, True),
    "ssl.truststore.certificates": Key(TYPE_PASSWORD, None, TLS, True),
}
DYNAMIC.update(SECURITY)
# The rest of DynamicListenerConfig: per broker.
DYNAMIC.update({
    "listeners": Key(TYPE_STRING, "PLAINTEXT://:9092", NONE, True),
    "listener.security.protocol.map": Key(TYPE_STRING, "", NONE, True),
    "principal.builder.class": Key(TYPE_CLASS, None, NONE, True),
    "ssl.protocol": Key(TYPE_STRING, "TLSv1.3", TLS, True),
    "ssl.provider": Key(TYPE_STRING, None, NONE, True),
    "ssl.cipher.suites": Key(TYPE_LIST, "", TLS, True),
    "ssl.enabled.protocols": Key(TYPE_LIST, "TLSv1.2,TLSv1.3", TLS, True),
    "ssl.keymanager.algorithm": Key(TYPE_STRING, "SunX509", NONE, True),
    "ssl.trustmanager.algorithm": Key(TYPE_STRING, "PKIX", NONE, True),
    "ssl.endpoint.identification.algorithm": Key(TYPE_STRING, "https", TLS, True),
    "ssl.secure.random.implementation": Key(TYPE_STRING, None, NONE, True),
    "ssl.client.auth": Key(TYPE_STRING, "none", TLS, True,
                           lambda v: v in ("required", "requested", "none"),
                           "one of required, requested, none"),
    "ssl.engine.factory.class": Key(TYPE_CLASS, None, NONE, True),
    "sasl.mechanism.inter.broker.protocol": Key(TYPE_STRING, "GSSAPI", NONE, True),
    "sasl.jaas.config": Key(TYPE_PASSWORD, None, NONE, True),
    "sasl.enabled.mechanisms": Key(TYPE_LIST, "GSSAPI", NONE, True),
    "sasl.kerberos.service.name": Key(TYPE_STRING, None, NONE, True),
    "sasl.kerberos.kinit.cmd": Key(TYPE_STRING, "/usr/bin/kinit", NONE, True),
    "sasl.kerberos.ticket.renew.window.factor": Key(TYPE_DOUBLE, "0.8", NONE, True),
    "sasl.kerberos.ticket.renew.jitter": Key(TYPE_DOUBLE, "0.05", NONE, True),
    "sasl.kerberos.min.time.before.relogin": Key(TYPE_LONG, "60000", NONE, True),
    "sasl.kerberos.principal.to.local.rules": Key(TYPE_LIST, "DEFAULT", NONE, True),
    "sasl.login.refresh.window.factor": Key(TYPE_DOUBLE, "0.8", NONE, True),
    "sasl.login.refresh.window.jitter": Key(TYPE_DOUBLE, "0.05", NONE, True),
    "sasl.login.refresh.min.period.seconds": Key(TYPE_SHORT, "60", NONE, True),
    "sasl.login.refresh.buffer.seconds": Key(TYPE_SHORT, "300", NONE, True),
})
# Kafka's ClusterLevelListenerConfigs: in its listener set, yet settable at the default.
CLUSTER_LEVEL_LISTENER = ("max.connections", "max.connection.creation.rate",
                          "num.network.threads")
# Kafka's ListenerMechanismConfigs: listener.name.<l>.<mechanism>.<config>.
MECHANISM_CONFIGS = ("sasl.jaas.config", "sasl.login.callback.handler.class",
                     "sasl.login.class", "sasl.server.callback.handler.class",
                     "connections.max.reauth.ms")
LISTENER_PREFIX = "listener.name."
REGISTRY_LISTEN = "schema.registry.listen"


def _base(name: str) -> tuple[str, bool]:
    """(the config a listener-prefixed name sets, whether it had the prefix)."""
    if name.startswith(LISTENER_PREFIX):
        rest = name[len(LISTENER_PREFIX):]
        _, dot, base = rest.partition(".")
        if dot:
            for mechanism_config in MECHANISM_CONFIGS:
                if base.endswith("." + mechanism_config):
                    return mechanism_config, True
            return base, True
    return name, False


def key_of(name: str) -> Key | None:
    base, prefixed = _base(name)
    key = DYNAMIC.get(base)
    if key is None and prefixed and base in MECHANISM_CONFIGS:
        return Key(TYPE_PASSWORD if base == "sasl.jaas.config" else TYPE_STRING, None, NONE, True)
    if key is not None and prefixed and base not in CLUSTER_LEVEL_LISTENER:
        return key._replace(per_broker=True)
    return key


def _known_static(name: str) -> bool:
    """A Kafka or chronik setting that is read at start only."""
    from chronik.broker.config import BROKER_DEFAULTS, IGNORED_PREFIXES
    from chronik.security.broker_security import KEYS as SECURITY_KEYS

    if name.startswith(LISTENER_PREFIX):
        return True
    if name in BROKER_DEFAULTS or name in SECURITY_KEYS or name.startswith(IGNORED_PREFIXES):
        return True
    if name.startswith("log.") or name.startswith(("authorizer.", "allow.everyone", "super.")):
        return True
    return any(s.name == name for d in TOPIC_CONFIGS.values() for s in d.synonyms)


def _scala_set(names: list[str]) -> str:
    return "Set(" + ", ".join(sorted(names)) + ")"


def parse(name: str, key: Key, raw: str) -> Any:
    """Kafka's ConfigDef parse of one value, and its validator; Refused INVALID_CONFIG."""
    text = raw.strip()
    bad = f"Invalid value {raw} for configuration {name}"
    try:
        if key.type in (TYPE_INT, TYPE_SHORT, TYPE_LONG):
            value: Any = int(text)
            bits = {TYPE_SHORT: 15, TYPE_INT: 31, TYPE_LONG: 63}[key.type]
            if not -(2**bits) <= value < 2**bits:
                raise ValueError(text)
        elif key.type == TYPE_DOUBLE:
            value = float(text)
        elif key.type == TYPE_BOOLEAN:
            if text.lower() not in ("true", "false"):
                raise ValueError(text)
            value = text.lower() == "true"
        elif key.type == TYPE_LIST:
            value = ",".join(p.strip() for p in text.split(",") if p.strip())
        else:
            value = text if key.type != TYPE_PASSWORD else raw
    except ValueError:
        kind = {TYPE_INT: "an int", TYPE_SHORT: "a short", TYPE_LONG: "a long",
                TYPE_DOUBLE: "a double", TYPE_BOOLEAN: "a boolean"}.get(key.type, "valid")
        raise Refused(errors.INVALID_CONFIG, f"{bad}: Expected value to be {kind}.") from None
    if key.check is not None and not key.check(value):
        raise Refused(errors.INVALID_CONFIG, f"{bad}: Value must be {key.expect}")
    if name == "max.connections.per.ip.overrides":
        from chronik.broker.config import ConfigError, _per_ip_overrides

        try:
            _per_ip_overrides(text)
        except ConfigError as exc:
            raise Refused(errors.INVALID_CONFIG, f"{bad}: {exc}") from None
    return value


def validate(
    broker: Any, configs: Mapping[str, str | None], per_broker: bool, this_broker: bool
) -> None:
    """Kafka's DynamicBrokerConfig.validateConfigs, in its order: static names, security
    configs without a listener prefix, value types, per-broker names at the default;
    then the thread pools' bounds and, for this broker, the TLS stores."""
    static = [n for n in configs if key_of(n) is None and _known_static(n)]
    if static:
        raise Refused(errors.INVALID_REQUEST,
                      f"Cannot update these configs dynamically: {_scala_set(static)}")
    bare = [n for n in configs if n in SECURITY]
    if bare:
        raise Refused(
            errors.INVALID_REQUEST,
            "These security configs can be dynamically updated only per-listener using the "
            f"listener prefix: {_scala_set(bare)}",
        )
    for name, raw in configs.items():
        key = key_of(name)
        if raw is None:
            raise Refused(errors.INVALID_REQUEST, f"Null value not supported for : {name}")
        if key is not None:
            parse(name, key, raw)
    if not per_broker:
        only = [n for n in configs if (k := key_of(n)) is not None and k.per_broker]
        if only:
            raise Refused(
                errors.INVALID_REQUEST,
                "Cannot update these configs at default cluster level, broker id must be "
                f"specified: {_scala_set(only)}",
            )
    current = broker.dynamic.effective()
    for name in THREAD_POOLS:
        if name not in configs:
            continue
        old = int(current.get(name, THREAD_POOLS[name]))
        new = int(str(configs[name]).strip())
        if new == old:
            continue
        message = f"Dynamic thread count update validation failed for {name}={new}"
        if new < old / 2:
            raise Refused(errors.INVALID_CONFIG,
                          f"{message}, value should be at least half the current value {old}")
        if new > old * 2:
            raise Refused(errors.INVALID_CONFIG,
                          f"{message}, value should not be greater than double the current "
                          f"value {old}")
    if this_broker and broker.security.tls is not None:
        tls_keys = {n for n in configs if (k := key_of(n)) is not None and k.effect == TLS}
        if tls_keys:
            from chronik.security.tls import TlsSettings, server_context

            values = dict(broker.dynamic.tls_values(configs))
            try:
                server_context(TlsSettings(values))
            except (ValueError, OSError) as exc:
                raise Refused(errors.INVALID_CONFIG,
                              f"Validation of dynamic config update of {_scala_set(list(tls_keys))}"
                              f" failed: {exc}") from None


class DynamicBrokerConfigs:
    """This broker's dynamic configs (its own and the cluster default), and what they
    change at runtime."""

    def __init__(self, broker: Any) -> None:
        self.broker = broker
        self.default: dict[str, str] = {}
        self.mine: dict[str, str] = {}
        self.path = Path(broker.data_dir) / FILE_NAME
        self._stored: dict[str, dict[str, str]] = {}  # a single node's file

    # -- reading ------------------------------------------------------------------------

    @property
    def static(self) -> Mapping[str, str]:
        return self.broker.config.overrides

    def effective(self) -> dict[str, str]:
        """Static settings overlaid by the cluster default, then this broker's own."""
        return {**self.static, **self.default, **self.mine}

    def tls_values(self, mine: Mapping[str, str | None] | None = None) -> dict[str, str]:
        """The TLS settings with the dynamic ssl.* configs (listener prefix dropped; one TLS
        context serves every TLS listener here), ``mine`` standing for this broker's own."""
        own = self.mine if mine is None else mine
        values = {k: v for k, v in self.static.items() if k.startswith("ssl.")}
        for layer in (self.default, own):
            for name, value in layer.items():
                base, _ = _base(name)
                if base.startswith("ssl.") and value is not None:
                    values[base] = value
        return values

    def entity(self, name: str) -> str:
        """The stored entity of a resource name ("" is the default), or Refused."""
        if name == "":
            return DEFAULT_ENTITY
        try:
            node = int(name)
        except ValueError:
            raise Refused(errors.INVALID_REQUEST,
                          f"Broker id must be an integer, but it is: {name}") from None
        cluster = self.broker.cluster
        if node == self.broker.node_id or (cluster is not None and node in cluster.view.brokers):
            return str(node)
        raise Refused(errors.INVALID_REQUEST,
                      f"Unexpected broker id, expected {self.broker.node_id}, but received {name}")

    def stored(self, entity: str) -> dict[str, str]:
        cluster = self.broker.cluster
        if cluster is not None:
            return dict(cluster.view.broker_configs.get(entity, {}))
        return dict(self._stored.get(entity, {}))

    # -- a single node's file -------------------------------------------------------------

    def load(self) -> None:
        if self.broker.cluster is not None or not self.path.exists():
            return
        try:
            data = json.loads(self.path.read_text())
            self._stored = {str(e): {str(k): str(v) for k, v in c.items()}
                            for e, c in data.get("brokers", {}).items()}
        except (ValueError, AttributeError, OSError) as exc:
            log.error("ignoring unreadable %s: %s", self.path, exc)
            return
        self.update(self._stored.get(DEFAULT_ENTITY, {}),
                    self._stored.get(str(self.broker.node_id), {}))

    # -- changing --------------------------------------------------------------------------

    async def write(self, entity: str, configs: dict[str, str]) -> None:
        cluster = self.broker.cluster
        if cluster is not None:
            await cluster.set_broker_configs(entity, configs)
            return
        from chronik.storage.diskio import replace_file
        from chronik.storage.errors import KafkaStorageError

        stored = {e: dict(c) for e, c in self._stored.items()}
        stored[entity] = dict(configs)
        stored = {e: c for e, c in stored.items() if c}
        data = json.dumps({"version": 1, "brokers": stored}, indent=1, sort_keys=True)
        try:
            replace_file(self.path, data.encode(), mode=0o600)
        except OSError as exc:
            raise Refused(KafkaStorageError.code,
                          f"Broker configs not changed: {exc.strerror or exc}") from None
        self._stored = stored
        self.update(stored.get(DEFAULT_ENTITY, {}), stored.get(str(self.broker.node_id), {}))

    def follow(self, view: Any) -> None:
        """A cluster view changed: take the default's and this broker's configs."""
        if not getattr(view, "loaded", True):
            return
        default = view.broker_configs.get(DEFAULT_ENTITY, {})
        mine = view.broker_configs.get(str(self.broker.node_id), {})
        if default != self.default or mine != self.mine:
            self.update(dict(default), dict(mine), reload_tls=True)

    def update(self, default: dict[str, str], mine: dict[str, str],
               reload_tls: bool = False) -> None:
        """New dynamic configs: log defaults, connection limits and TLS follow at once."""
        before = self.effective()
        ssl_before = (self.tls_values(), self.mine)
        self.default, self.mine = default, mine
        after = self.effective()
        changed = {k for k in set(before) | set(after) if before.get(k) != after.get(k)}
        effects = {(key_of(k) or Key(TYPE_STRING, None)).effect for k in changed}
        for name in sorted(changed):
            key = key_of(name)
            idle = key is None or key.effect == NONE or (
                key.effect == REPLICATION and self.broker.cluster is None)  # nothing replicates
            if idle:
                log.info("dynamic broker config %s is stored but has no effect on chronik", name)
            else:
                shown = "(hidden)" if key.type == TYPE_PASSWORD else after.get(name, "(default)")
                log.info("dynamic broker config %s is now %s", name, shown)
        catalog = getattr(self.broker, "catalog", None)
        if LOG in effects and catalog is not None:
            catalog.update_broker_configs(after)
        if CONNECTIONS in effects:
            self._apply_connections(after)
        tls_changed = TLS in effects or (reload_tls and ssl_before[1] != self.mine and any(
            _base(k)[0].startswith("ssl.") for k in self.mine))
        if tls_changed:
            self.apply_tls()

    def started(self) -> None:
        """The listener is up: the connection limits and TLS stores of the dynamic configs
        read at start apply."""
        self._apply_connections(self.effective())
        if any(_base(k)[0].startswith("ssl.") for k in (*self.default, *self.mine)):
            self.apply_tls()

    def apply_tls(self) -> None:
        security = self.broker.security
        if security.tls is None:
            return
        security.tls_settings.values.clear()
        security.tls_settings.values.update(self.tls_values())
        self.broker.reload_tls()

    def _apply_connections(self, values: Mapping[str, str]) -> None:
        from chronik.broker.config import _per_ip_overrides

        listener = getattr(self.broker, "_listener", None)
        if listener is None:
            return
        static = self.broker.config.values
        try:
            listener.max_connections = int(values.get("max.connections",
                                                      static["max.connections"]))
            listener.max_per_ip = int(values.get("max.connections.per.ip",
                                                 static["max.connections.per.ip"]))
            listener.per_ip_overrides = _per_ip_overrides(
                values.get("max.connections.per.ip.overrides",
                           static["max.connections.per.ip.overrides"]))
        except (ValueError, KeyError) as exc:
            log.error("connection limits not changed: %s", exc)

    # -- describing ---------------------------------------------------------------------

    def describe(self, resource_name: str, names: list[str] | None) -> list[ConfigEntry]:
        """Kafka's DescribeConfigs of a broker: every config with its value, source and
        synonyms (dynamic per broker, dynamic default, static, default); for "" only the
        cluster default's dynamic configs."""
        from chronik.broker.config import BROKER_DEFAULTS

        config = self.broker.config
        per_broker = resource_name != ""
        if per_broker:
            listed = set(config.values) | set(DYNAMIC) | set(self.default) | set(self.mine)
        else:
            listed = set(self.default)
        entries = []
        for name in sorted(listed):
            if names is not None and name not in names:
                continue
            key = key_of(name)
            layers: list[tuple[Mapping[str, str], int]] = []
            if per_broker:
                layers.append((self.mine, SOURCE_DYNAMIC_BROKER))
            layers += [(self.default, SOURCE_DYNAMIC_DEFAULT_BROKER),
                       (self.static, SOURCE_STATIC_BROKER)]
            synonyms = [ConfigSynonym(name, layer[name], source)
                        for layer, source in layers if name in layer]
            default = BROKER_DEFAULTS.get(name, key.default if key is not None else None)
            if name in config.values and name not in config.overrides:
                default = config.values[name]
            if default is not None or key is not None or name in config.values:
                synonyms.append(ConfigSynonym(name, default, SOURCE_DEFAULT))
            if not synonyms:
                continue
            if per_broker and name == REGISTRY_LISTEN:
                synonyms = self._registry_synonyms(synonyms)
            sensitive = key is not None and key.type == TYPE_PASSWORD
            if sensitive:
                synonyms = [s._replace(value=None) for s in synonyms]
            first = synonyms[0]
            entries.append(ConfigEntry(
                name, first.value, first.source, sensitive, key is None, synonyms,
                key.type if key is not None else TYPE_STRING, "",
            ))
        return entries

    def _registry_synonyms(self, synonyms: list[ConfigSynonym]) -> list[ConfigSynonym]:
        """schema.registry.listen as clients can use it: the URL the registry is served at
        (a port 0 in the setting is the port bound; --schema-registry-listen counts as a
        static setting), or "" when this broker serves none."""
        api = getattr(self.broker, "registry_api", None)
        url = api.url if api is not None else None
        if not url:
            return [ConfigSynonym(REGISTRY_LISTEN, "", SOURCE_DEFAULT)]
        return [ConfigSynonym(REGISTRY_LISTEN, url, SOURCE_STATIC_BROKER),
                *(s for s in synonyms if s.source == SOURCE_DEFAULT)]

    def topic_layers(self) -> dict[str, Any]:
        """The broker layers a topic's configs resolve through (describe_topic_configs)."""
        return {"dynamic": self.mine, "dynamic_default": self.default}
