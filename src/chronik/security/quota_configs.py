"""Client quota configurations, as Kafka keeps them (KIP-55, KIP-546).

A quota entity is a user, a client id, or the pair, each name possibly the default
(`<default>`). It is kept under Kafka's ZooKeeper entity path, with sanitized names
(Kafka's Sanitizer: URL-encoded, `*` as %2A, space as %20):

    users/<user>                 users/<default>
    users/<user>/clients/<id>    users/<user>/clients/<default>
    users/<default>/clients/<id> users/<default>/clients/<default>
    clients/<id>                 clients/<default>

and holds Kafka's keys as strings: producer_byte_rate and consumer_byte_rate (longs,
bytes per second), request_percentage and controller_mutation_rate (doubles; stored,
not enforced).

A single broker keeps them in `<data-dir>/security/quotas.json`, replaced whole (written
beside, fsynced, renamed, directory fsynced) on every change:

    {"version": 1,
     "quotas": {"users/alice": {"producer_byte_rate": "102400"},
                "clients/<default>": {"consumer_byte_rate": "1048576"}}}

A cluster keeps the same maps in ZooKeeper, in /config/users and /config/clients
(chronik.cluster.quota_znodes).
"""

from __future__ import annotations

import json
import threading
import urllib.parse
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from chronik.protocol import errors
from chronik.storage.diskio import replace_file

FILE = Path("security") / "quotas.json"

DEFAULT = "<default>"
USER = "user"
CLIENT_ID = "client-id"
IP = "ip"
PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
# Kafka's QuotaConfigs for user, client-id and user/client-id entities, with their types.
KEYS: dict[str, type] = {
    PRODUCER_BYTE_RATE: int,
    CONSUMER_BYTE_RATE: int,
    REQUEST_PERCENTAGE: float,
    CONTROLLER_MUTATION_RATE: float,
}
# DescribeClientQuotas match types.
MATCH_EXACT = 0
MATCH_DEFAULT = 1
MATCH_SPECIFIED = 2

# (user, client id) of an entity: None where the entity has no such part, DEFAULT for
# the default, else the sanitized name.
Entity = tuple[str | None, str | None]
# An entity as the protocol spells it: (entity type, name or None for the default).
Components = list[tuple[str, str | None]]


class QuotaError(ValueError):
    """A request Kafka refuses, with its error code."""

    def __init__(self, message: str, code: int = errors.INVALID_REQUEST) -> None:
        super().__init__(message)
        self.code = code


class QuotaFileError(ValueError):
    pass


def sanitize(name: str) -> str:
    """Kafka's Sanitizer.sanitize: Java's URLEncoder, then `*` -> %2A, `+` -> %20."""
    return urllib.parse.quote(name, safe="*").replace("~", "%7E").replace("*", "%2A")


def desanitize(name: str) -> str:
    """Kafka's Sanitizer.desanitize (Java's URLDecoder)."""
    return urllib.parse.unquote_plus(name)


def entity_path(entity: Entity) -> str:
    user, client = entity
    if user is not None and client is not None:
        return f"users/{user}/clients/{client}"
    if user is not None:
        return f"users/{user}"
    if client is not None:
        return f"clients/{client}"
    raise QuotaError("Invalid empty client quota entity")


def parse_path(path: str) -> Entity | None:
    """The entity of a path (None: not a quota entity's path)."""
    parts = path.split("/")
    if len(parts) == 2 and parts[0] == "users" and parts[1]:
        return parts[1], None
    if len(parts) == 2 and parts[0] == "clients" and parts[1]:
        return None, parts[1]
    if len(parts) == 4 and parts[0] == "users" and parts[2] == "clients" and parts[1] and parts[3]:
        return parts[1], parts[3]
    return None


def components(entity: Entity) -> Components:
    """The entity as the protocol names it: user first, then client-id."""
    out: Components = []
    user, client = entity
    if user is not None:
        out.append((USER, None if user == DEFAULT else desanitize(user)))
    if client is not None:
        out.append((CLIENT_ID, None if client == DEFAULT else desanitize(client)))
    return out


def entity_of(parts: Iterable[tuple[str, str | None]]) -> Entity:
    """Kafka's validation of an AlterClientQuotas entity."""
    seen: dict[str, str | None] = {}
    for entity_type, name in parts:
        if entity_type in seen:
            raise QuotaError(f"Invalid client quota entity, duplicate entity entry {entity_type}")
        if entity_type not in (USER, CLIENT_ID, IP):
            raise QuotaError(f"Unhandled client quota entity type: {entity_type}")
        if name is not None and not name:
            raise QuotaError(f"Empty {entity_type} not supported")
        seen[entity_type] = name
    if not seen:
        raise QuotaError("Invalid empty client quota entity")
    if IP in seen:
        if len(seen) > 1:
            raise QuotaError(
                "Invalid quota entity combination, IP entity should not be used with "
                "user/client ID entity."
            )
        raise QuotaError("IP quotas (connection_creation_rate) are not supported by chronik")

    def named(entity_type: str) -> str | None:
        if entity_type not in seen:
            return None
        name = seen[entity_type]
        return DEFAULT if name is None else sanitize(name)

    return named(USER), named(CLIENT_ID)


def quota_value(key: str, value: float) -> str:
    """Kafka's check of one quota value, and the string it stores."""
    kind = KEYS.get(key)
    if kind is None:
        raise QuotaError(f"Invalid configuration key {key}")
    if not value > 0.0:  # NaN too
        raise QuotaError(f"Quota {key} must be greater than 0")
    if kind is int:
        epsilon = 1e-6
        if value >= 2**63:
            raise QuotaError(f"Configuration {key} must be a Long value")
        whole = int(value + epsilon)
        if abs(whole - value) > epsilon:
            raise QuotaError(f"Configuration {key} must be a Long value")
        return str(whole)
    return repr(float(value))


def quota_configs(config: Mapping[str, str]) -> dict[str, float]:
    """The quota keys of an entity's config map (a user's also holds SCRAM credentials),
    as numbers; values that are not numbers are left out."""
    found: dict[str, float] = {}
    for key, text in config.items():
        if key in KEYS:
            try:
                found[key] = float(text)
            except (TypeError, ValueError):
                continue
    return found


def apply(current: Mapping[str, str], ops: Mapping[str, str | None]) -> dict[str, str]:
    after = dict(current)
    for key, value in ops.items():
        if value is None:
            after.pop(key, None)
        else:
            after[key] = value
    return after


def _matches(component: tuple[int, str | None] | None, name: str | None, strict: bool) -> bool:
    """Kafka's ZkAdminManager matching of one entity part against a filter component;
    ``name`` is the part's sanitized name, DEFAULT, or None where the entity lacks it."""
    if component is None:
        return name is None or not strict
    match_type, match = component
    if match_type == MATCH_SPECIFIED:
        return name is not None
    wanted = DEFAULT if match_type == MATCH_DEFAULT or match is None else sanitize(match)
    return name == wanted


def describe(
    quotas: Mapping[str, Mapping[str, str]],
    filter_components: Iterable[tuple[str, int, str | None]],
    strict: bool,
) -> list[tuple[Components, dict[str, float]]]:
    """DescribeClientQuotas as Kafka's ZooKeeper-mode broker answers it: the entities the
    filter matches, with their quota values. Raises QuotaError for a bad filter."""
    wanted: dict[str, tuple[int, str | None]] = {}
    for entity_type, match_type, match in filter_components:
        if entity_type in (USER, CLIENT_ID, IP):
            if entity_type in wanted:
                name = "client" if entity_type == CLIENT_ID else entity_type
                raise QuotaError(f"Duplicate {name} filter component entity type")
        elif entity_type == "":
            raise QuotaError("Unexpected empty filter component entity type")
        else:
            raise QuotaError(
                f"Custom entity type '{entity_type}' not supported", errors.UNSUPPORTED_VERSION
            )
        if match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED):
            raise QuotaError(f"Unexpected match type: {match_type}")
        wanted[entity_type] = (match_type, match)
    if IP in wanted:
        if USER in wanted or CLIENT_ID in wanted:
            raise QuotaError(
                "Invalid entity filter component combination, IP filter component should not "
                "be used with user or clientId filter component."
            )
        return []  # no IP quotas are kept
    found = []
    for path, config in quotas.items():
        entity = parse_path(path)
        values = quota_configs(config)
        if entity is None or not values:
            continue
        user, client = entity
        if _matches(wanted.get(USER), user, strict) and _matches(
            wanted.get(CLIENT_ID), client, strict
        ):
            found.append((components(entity), values))
    found.sort(key=lambda item: [(t, n is not None, n or "") for t, n in item[0]])
    return found


class QuotaFile:
    """Every entity's quota config, read once and kept in memory; each change is written
    through before it is visible. ``generation`` counts changes."""

    def __init__(self, data_dir: Path) -> None:
        self.path = Path(data_dir) / FILE
        self._lock = threading.Lock()
        self.quotas: dict[str, dict[str, str]] = self._read()
        self.generation = 0

    def _read(self) -> dict[str, dict[str, str]]:
        try:
            raw = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise QuotaFileError(f"cannot read {self.path}: {exc}") from None
        try:
            return {
                str(path): {str(k): str(v) for k, v in config.items()}
                for path, config in raw["quotas"].items()
                if parse_path(str(path)) is not None
            }
        except (KeyError, AttributeError, TypeError) as exc:
            raise QuotaFileError(f"{self.path} is not a quotas file: {exc}") from None

    async def alter(self, changes: Mapping[str, Mapping[str, str | None]]) -> None:
        """entity path -> key -> value (None: removed), in one write, all or none
        (OSError: nothing changed)."""
        with self._lock:
            quotas = {path: dict(config) for path, config in self.quotas.items()}
            for path, ops in changes.items():
                after = apply(quotas.get(path, {}), ops)
                if after:
                    quotas[path] = after
                else:
                    quotas.pop(path, None)
            if quotas == self.quotas:
                return
            body: dict[str, Any] = {"version": 1, "quotas": dict(sorted(quotas.items()))}
            replace_file(self.path, json.dumps(body, indent=1).encode(), 0o600)
            self.quotas = quotas
            self.generation += 1
