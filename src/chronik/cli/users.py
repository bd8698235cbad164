"""`chronik users add|delete|list`: SCRAM users, as Kafka's kafka-configs.sh --entity-type
users and kafka-storage.sh format --add-scram manage them.

With --data-dir the broker's credentials file is written directly: that is how the first
(admin) user of a single broker is made, before it starts; --zookeeper writes a
cluster's /config/users znodes directly, as kafka-configs --zookeeper did. Without
either, the change goes to a running broker over the protocol
(AlterUserScramCredentials, DescribeUserScramCredentials).
Passwords come from a file (its first line) or stdin, never from the command line.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from chronik.cli.args import add_bootstrap
from chronik.cli.errors import CliError

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION")
    sub.required = True
    add = sub.add_parser("add", help="create a user or change its password")
    add.add_argument("name")
    source = add.add_mutually_exclusive_group(required=True)
    source.add_argument("--password-file", metavar="FILE", help="the password is its first line")
    source.add_argument(
        "--password-stdin", action="store_true", help="read the password from stdin"
    )
    add.add_argument(
        "--mechanism",
        action="append",
        choices=MECHANISMS,
        help="SCRAM mechanism to store a credential for (repeatable; default both)",
    )
    add.add_argument("--iterations", type=int, default=4096, help="4096-16384 (default 4096)")
    delete = sub.add_parser("delete", help="remove a user's credentials")
    delete.add_argument("name")
    delete.add_argument("--mechanism", action="append", choices=MECHANISMS)
    sub.add_parser("list", help="users and their mechanisms")
    for child in sub.choices.values():
        direct = child.add_mutually_exclusive_group()
        direct.add_argument(
            "--data-dir",
            default=None,
            help="write a single broker's credentials file directly (the broker not running)",
        )
        direct.add_argument(
            "--zookeeper",
            default=None,
            metavar="CONNECT",
            help="write a cluster's users in ZooKeeper directly (its zookeeper.connect)",
        )
        add_bootstrap(child)


def _password(args: argparse.Namespace) -> str:
    if args.password_stdin:
        text = sys.stdin.readline()
    else:
        try:
            lines = Path(args.password_file).read_text().splitlines()
        except OSError as exc:
            raise CliError(f"cannot read {args.password_file}: {exc.strerror}") from None
        text = lines[0] if lines else ""
    password = text.rstrip("\r\n")
    if not password:
        raise CliError("the password is empty")
    return password


def run(args: argparse.Namespace) -> int:
    if args.data_dir is not None or args.zookeeper is not None:
        return _offline(args)
    return _online(args)


def _offline(args: argparse.Namespace) -> int:
    from chronik.security.credentials import CredentialError, CredentialStore

    try:
        store: CredentialStore | ZooKeeperUsers = (
            CredentialStore(Path(args.data_dir))
            if args.data_dir is not None
            else ZooKeeperUsers(args.zookeeper)
        )
    except (CredentialError, OSError) as exc:
        raise CliError(str(exc)) from None
    try:
        _change(args, store)
    except (CredentialError, ValueError, OSError) as exc:
        raise CliError(str(exc)) from None
    finally:
        if isinstance(store, ZooKeeperUsers):
            store.close()
    return 0


def _change(args: argparse.Namespace, store: Any) -> None:
    from chronik.security.scram import make_credential

    if args.action == "add":
        password = _password(args)
        for mechanism in args.mechanism or MECHANISMS:
            credential = make_credential(mechanism, password, args.iterations)
            store.upsert(args.name, mechanism, credential)
        print(f"user {args.name}: {', '.join(args.mechanism or MECHANISMS)}")
    elif args.action == "delete":
        mechanisms = args.mechanism or [None]
        if not any([store.delete(args.name, m) for m in mechanisms]):
            raise CliError(f"user {args.name} has no such credentials")
        print(f"user {args.name} deleted")
    else:
        for name, creds in sorted(store.users().items()):
            infos = ", ".join(f"{m} ({c.iterations})" for m, c in sorted(creds.items()))
            print(f"{name}\t{infos}")


class ZooKeeperUsers:
    """A cluster's /config/users, read and written as the credentials file is."""

    def __init__(self, connect: str) -> None:
        from kazoo.client import KazooClient
        from kazoo.handlers.threading import KazooTimeoutError

        from chronik.cluster.session import split_connect

        hosts, chroot = split_connect(connect)
        self.client = KazooClient(hosts=hosts + chroot, timeout=10)
        try:
            self.client.start(timeout=10)
        except KazooTimeoutError:
            raise CliError(f"cannot reach ZooKeeper at {connect}") from None

    def close(self) -> None:
        self.client.stop()
        self.client.close()

    def _change(self, changes: list[tuple[str, str, str | None]]) -> None:
        from chronik.cluster.users import write_users

        write_users(self.client, changes)

    def upsert(self, user: str, mechanism: str, credential: Any) -> None:
        self._change([(user, mechanism, credential.to_kafka())])

    def delete(self, user: str, mechanism: str | None = None) -> bool:
        from chronik.cluster.users import read_user

        config, _ = read_user(self.client, user)
        # The znode may also hold the user's client quotas, which stay.
        creds = [m for m in config if m in MECHANISMS]
        gone = creds if mechanism is None else [mechanism] if mechanism in creds else []
        if gone:
            self._change([(user, m, None) for m in gone])
        return bool(gone)

    def users(self) -> dict[str, dict[str, Any]]:
        from chronik.cluster.users import read_users
        from chronik.security.scram import ScramCredential

        return {
            name: {m: ScramCredential.from_kafka(t) for m, t in config.items()}
            for name, config in read_users(self.client).items()
        }


def _online(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import (
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    from chronik.cli.clients import Cluster, wait

    cluster = Cluster.from_args(args)
    cluster.metadata()  # reached and authenticated within --connect-timeout, or one error
    admin = cluster.admin
    kinds = {m: getattr(ScramMechanism, m.replace("-", "_")) for m in MECHANISMS}
    if args.action == "list":
        found = wait(admin.describe_user_scram_credentials(), "describe users")
        for name, description in sorted(found.items()):
            infos = ", ".join(
                f"{i.mechanism.name.replace('_', '-')} ({i.iterations})"
                for i in description.scram_credential_infos
            )
            print(f"{name}\t{infos}")
        return 0
    if args.action == "add":
        password = _password(args).encode()
        alterations = [
            UserScramCredentialUpsertion(
                args.name, ScramCredentialInfo(kinds[m], args.iterations), password
            )
            for m in args.mechanism or MECHANISMS
        ]
    else:
        mechanisms = args.mechanism or MECHANISMS
        alterations = [UserScramCredentialDeletion(args.name, kinds[m]) for m in mechanisms]
    futures = admin.alter_user_scram_credentials(alterations)
    for _, future in futures.items():
        wait(future, f"{args.action} user {args.name}")
    print(f"user {args.name} {'deleted' if args.action == 'delete' else 'updated'}")
    return 0
