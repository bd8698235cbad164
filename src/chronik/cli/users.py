"""`chronik users add|delete|list`: SCRAM users, as Kafka's kafka-configs.sh --entity-type
users and kafka-storage.sh format --add-scram manage them.

With --data-dir the broker's credentials file is written directly: that is how the first
(admin) user is made, before the broker starts. Without it, the change goes to a running
broker over the protocol (AlterUserScramCredentials, DescribeUserScramCredentials).
Passwords come from a file (its first line) or stdin, never from the command line.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

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
        child.add_argument(
            "--data-dir",
            default=None,
            help="write the broker's credentials file directly (the broker not running)",
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
    if args.data_dir is not None:
        return _offline(args)
    return _online(args)


def _offline(args: argparse.Namespace) -> int:
    from chronik.security.credentials import CredentialError, CredentialStore
    from chronik.security.scram import make_credential

    try:
        store = CredentialStore(Path(args.data_dir))
        if args.action == "add":
            password = _password(args)
            for mechanism in args.mechanism or MECHANISMS:
                store.upsert(args.name, mechanism, make_credential(mechanism, password,
                                                                   args.iterations))
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
    except (CredentialError, ValueError, OSError) as exc:
        raise CliError(str(exc)) from None
    return 0


def _online(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import (
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    from chronik.cli.clients import Cluster, wait

    cluster = Cluster.from_args(args)
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
