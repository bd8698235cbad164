"""SCRAM credentials of a single broker, in its data dir.

File `<data-dir>/security/users.json`, replaced whole (written beside, fsynced, renamed,
directory fsynced) on every change:

    {"version": 1,
     "users": {"alice": {"SCRAM-SHA-512":
                             "salt=...,stored_key=...,server_key=...,iterations=4096"}}}

Each user's entry is the `config` of Kafka's ZooKeeper znode `/config/users/<name>`, the
same strings, so credentials move between the two unchanged. No password is stored.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

from chronik.security.scram import MECHANISMS, ScramCredential
from chronik.storage.diskio import replace_file

FILE = Path("security") / "users.json"


class CredentialError(ValueError):
    pass


class CredentialStore:
    """User -> mechanism -> credential, read once and kept in memory; every change is
    written through before it is visible."""

    def __init__(self, data_dir: Path) -> None:
        self.path = Path(data_dir) / FILE
        self._lock = threading.Lock()
        self._users: dict[str, dict[str, ScramCredential]] = self._read()

    def _read(self) -> dict[str, dict[str, ScramCredential]]:
        try:
            raw = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise CredentialError(f"cannot read {self.path}: {exc}") from None
        users: dict[str, dict[str, ScramCredential]] = {}
        try:
            for name, config in raw["users"].items():
                users[name] = {
                    mechanism: ScramCredential.from_kafka(text)
                    for mechanism, text in config.items()
                    if mechanism in MECHANISMS
                }
        except (KeyError, AttributeError, TypeError, ValueError) as exc:
            raise CredentialError(f"{self.path} is not a credentials file: {exc}") from None
        return users

    def lookup(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._users.get(user, {}).get(mechanism)

    def mechanisms(self, user: str) -> dict[str, ScramCredential]:
        return dict(self._users.get(user, {}))

    def users(self) -> dict[str, dict[str, ScramCredential]]:
        return {name: dict(creds) for name, creds in self._users.items()}

    def upsert(self, user: str, mechanism: str, credential: ScramCredential) -> None:
        self.apply([(user, mechanism, credential)])

    def delete(self, user: str, mechanism: str | None = None) -> bool:
        """Remove one mechanism's credential (or all of the user's); whether any was there."""
        creds = self._users.get(user, {})
        gone = list(creds) if mechanism is None else [mechanism] if mechanism in creds else []
        if gone:
            self.apply([(user, m, None) for m in gone])
        return bool(gone)

    def apply(self, changes: list[tuple[str, str, ScramCredential | None]]) -> None:
        """(user, mechanism, credential or None to remove) all at once: one write of the
        file, and none of them if it fails."""
        with self._lock:
            users = self.users()
            for user, mechanism, credential in changes:
                if mechanism not in MECHANISMS:
                    raise CredentialError(f"unknown SCRAM mechanism {mechanism}")
                if not user:
                    raise CredentialError("a user name cannot be empty")
                if credential is not None:
                    users.setdefault(user, {})[mechanism] = credential
                elif user in users:
                    users[user].pop(mechanism, None)
                    if not users[user]:
                        del users[user]
            self._write(users)
            self._users = users

    def _write(self, users: dict[str, dict[str, ScramCredential]]) -> None:
        body = {
            "version": 1,
            "users": {
                name: {m: c.to_kafka() for m, c in sorted(creds.items())}
                for name, creds in sorted(users.items())
            },
        }
        replace_file(self.path, json.dumps(body, indent=1).encode(), 0o600)


class SharedCredentials:
    """The credentials of a cluster, read from what ``source`` returns (the cluster
    view's copy of ZooKeeper's /config/users: user -> mechanism -> Kafka's string).
    Changes go to ZooKeeper through the cluster, not here."""

    def __init__(self, source: Callable[[], Mapping[str, Mapping[str, str]]]) -> None:
        self.source = source
        self._parsed: dict[str, ScramCredential] = {}

    def _parse(self, text: str) -> ScramCredential | None:
        credential = self._parsed.get(text)
        if credential is None:
            try:
                credential = ScramCredential.from_kafka(text)
            except ValueError:
                return None
            if len(self._parsed) > 10_000:
                self._parsed.clear()
            self._parsed[text] = credential
        return credential

    def lookup(self, user: str, mechanism: str) -> ScramCredential | None:
        text = self.source().get(user, {}).get(mechanism)
        return None if text is None else self._parse(text)

    def mechanisms(self, user: str) -> dict[str, ScramCredential]:
        found = {}
        for mechanism, text in self.source().get(user, {}).items():
            credential = self._parse(text) if mechanism in MECHANISMS else None
            if credential is not None:
                found[mechanism] = credential
        return found

    def users(self) -> dict[str, dict[str, ScramCredential]]:
        return {name: creds for name in self.source() if (creds := self.mechanisms(name))}
