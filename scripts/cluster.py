"""`make cluster`: a local ZooKeeper and three chronik brokers forming one cluster.

ZooKeeper listens on 127.0.0.1:2181 with its data in ./chronik-cluster/zookeeper; broker
N (1..3) listens on 127.0.0.1:9091+N with its data in ./chronik-cluster/broker-N and its
log in ./chronik-cluster/broker-N.log. Ctrl-C (or SIGTERM) stops the brokers, then
ZooKeeper. Data is kept between runs; delete ./chronik-cluster to start afresh.
"""

from __future__ import annotations

import argparse
import importlib.util
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from chronik.cluster.zookeeper_process import ZooKeeperProcess, ZooKeeperUnavailable


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=Path("chronik-cluster"))
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--zookeeper-port", type=int, default=2181)
    parser.add_argument("--base-port", type=int, default=9092, help="port of broker 1")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE",
        help="a setting for every broker (repeatable), as for `chronik serve --set`",
    )
    return parser.parse_args()


def listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


class Stop(Exception):
    pass


def on_signal(signum: int, frame: object) -> None:
    raise Stop


def main() -> int:
    args = parse_args()
    base = args.dir.resolve()
    base.mkdir(parents=True, exist_ok=True)
    for port in [args.zookeeper_port] + [args.base_port + i for i in range(args.brokers)]:
        if listening(port):
            print(f"port {port} is already in use; is a cluster already running?", file=sys.stderr)
            return 1

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    zk = ZooKeeperProcess(base / "zookeeper", args.zookeeper_port)
    brokers: list[subprocess.Popen[bytes]] = []
    try:
        try:
            zk.start()
        except ZooKeeperUnavailable as exc:
            print(f"{exc}; `make deps` (scripts/install-test-deps.sh) installs it",
                  file=sys.stderr)
            return 1
        print(f"ZooKeeper on {zk.connect}, data in {zk.data_dir}")
        for n in range(1, args.brokers + 1):
            port = args.base_port + n - 1
            cmd = [
                sys.executable, "-m", "chronik", "serve",
                "--data-dir", str(base / f"broker-{n}"),
                "--listen", f"127.0.0.1:{port}",
                "--set", f"zookeeper.connect={zk.connect}",
                "--set", f"broker.id={n}",
            ]
            for setting in args.set:
                cmd += ["--set", setting]
            log = open(base / f"broker-{n}.log", "ab")  # noqa: SIM115
            # A session of its own: Ctrl-C reaches this script only, which stops the
            # brokers before ZooKeeper so that they deregister cleanly.
            brokers.append(
                subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                 start_new_session=True)
            )
            log.close()
        for n, proc in enumerate(brokers, start=1):
            port = args.base_port + n - 1
            while not listening(port):
                if proc.poll() is not None:
                    print(f"broker {n} exited with {proc.returncode}; see "
                          f"{base / f'broker-{n}.log'}", file=sys.stderr)
                    return 1
                time.sleep(0.1)
            print(f"broker {n} on 127.0.0.1:{port}, data in {base / f'broker-{n}'}, "
                  f"log in {base / f'broker-{n}.log'}")
        bootstrap = f"127.0.0.1:{args.base_port}"
        describe = (
            f"  .venv/bin/chronik cluster describe --bootstrap-server {bootstrap}\n"
            if importlib.util.find_spec("chronik.cli.cluster") is not None
            else ""
        )
        print(
            "\nThe cluster is up. Try:\n"
            f"{describe}"
            "  .venv/bin/chronik topics create demo --partitions 12 "
            f"--bootstrap-server {bootstrap}\n"
            f"  .venv/bin/chronik topics describe demo --bootstrap-server {bootstrap}\n"
            f"  zkCli.sh -server {zk.connect} ls /brokers/ids   "
            "(Debian: /usr/share/zookeeper/bin/zkCli.sh)\n"
            "Ctrl-C stops the brokers and ZooKeeper.",
            flush=True,
        )
        while True:
            for n, proc in enumerate(brokers, start=1):
                if proc.poll() is not None:
                    print(f"broker {n} exited with {proc.returncode}; see "
                          f"{base / f'broker-{n}.log'}", file=sys.stderr)
                    return 1
            time.sleep(0.5)
    except Stop:
        print("\nstopping", flush=True)
        return 0
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for proc in brokers:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in brokers:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        zk.stop()


if __name__ == "__main__":
    sys.exit(main())
