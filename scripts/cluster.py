"""`make cluster`: a local ZooKeeper and three chronik brokers forming one cluster.

ZooKeeper listens on 127.0.0.1:2181 with its data in ./chronik-cluster/zookeeper; broker
N listens on 127.0.0.1:9091+N with its data in ./chronik-cluster/broker-N, its log in
./chronik-cluster/broker-N.log and its pid in ./chronik-cluster/broker-N.pid. A broker
that dies (killed, crashed) is reported in one line and the others keep running.

From another terminal, `scripts/cluster.py stop|kill|start|restart N` stops (SIGTERM),
kills (SIGKILL), starts or restarts broker N of the running cluster with the same
settings, data dir and port; `start N` for an N beyond the running brokers adds one.
`scripts/cluster.py status` lists them (scripts/cluster_control.py: how a command
reaches the running script).

Ctrl-C (or SIGTERM) stops the brokers, then ZooKeeper. Data is kept between runs; delete
./chronik-cluster to start afresh.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import cluster_control as control

DEFAULT_DIR = Path("chronik-cluster")
MAX_BROKER_ID = 100
# Shorter than Kafka's 18 s so that a killed broker's partitions fail over while the
# user watches; `--set zookeeper.session.timeout.ms=...` overrides it.
SESSION_TIMEOUT_MS = 6000
STOP_GRACE_S = 30.0
# How long a command waits for the supervisor: a start lasts until the broker listens.
COMMAND_TIMEOUT_S = {"start": 120.0, "restart": 150.0, "stop": 60.0, "kill": 30.0,
                     "status": 10.0}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog="Without ACTION: run the cluster until Ctrl-C. With ACTION: act on the "
        "cluster already running from --dir.",
    )
    parser.add_argument("action", nargs="?", choices=control.ACTIONS, metavar="ACTION",
                        help="start|stop|kill|restart N, or status")
    parser.add_argument("broker", nargs="?", type=int, metavar="N", help="a broker id")
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    parser.add_argument("--brokers", type=int, default=3, help="brokers to start with")
    parser.add_argument("--zookeeper-port", type=int, default=2181)
    parser.add_argument("--base-port", type=int, default=9092, help="port of broker 1")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE",
        help="a setting for every broker (repeatable), as for `chronik serve --set`",
    )
    args = parser.parse_args(argv)
    if args.action in (None, "status") and args.broker is not None:
        parser.error(f"a broker id goes with start, stop, kill or restart, not {args.action}")
    if args.action not in (None, "status") and args.broker is None:
        parser.error(f"{args.action} needs a broker id")
    if not 1 <= args.brokers <= MAX_BROKER_ID:
        parser.error(f"--brokers must be 1-{MAX_BROKER_ID}")
    return args


def listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def shown_path(path: Path) -> str:
    """`path` relative to the working directory when it is under it, for shorter hints."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def how_it_ended(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}"


@dataclass
class Broker:
    id: int
    port: int
    data_dir: Path
    log_path: Path
    pid_path: Path
    proc: subprocess.Popen[bytes] | None = None
    up: bool = False
    stop_sent_at: float | None = None
    asked_to: str | None = None  # "stop", "kill" or "restart" while that is under way
    # Requests answered once the broker is up (start) or has exited (stop, kill).
    waiting: list[str] = field(default_factory=list)

    @property
    def running(self) -> bool:
        return self.proc is not None


class Supervisor:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.base: Path = args.dir.resolve()
        self.brokers: dict[int, Broker] = {}
        self.zk_connect = f"127.0.0.1:{args.zookeeper_port}"
        self.stopping = False
        self.greeted = False
        script = shown_path(Path(__file__).resolve())
        python = shown_path(Path(sys.executable).absolute())
        self.command = f"{shlex.quote(python)} {shlex.quote(script)}"
        self.dir_option = (f" --dir {shlex.quote(shown_path(self.base))}"
                           if self.base != DEFAULT_DIR.resolve() else "")

    def hint(self, action: str) -> str:
        """The command that does `action` to this cluster from another terminal."""
        return f"{self.command} {action}{self.dir_option}"

    def broker(self, n: int) -> Broker:
        if n not in self.brokers:
            self.brokers[n] = Broker(
                n, self.args.base_port + n - 1, self.base / f"broker-{n}",
                self.base / f"broker-{n}.log", self.base / f"broker-{n}.pid",
            )
        return self.brokers[n]

    def start(self, n: int) -> str | None:
        """Start broker n; a reason when it cannot be."""
        if not 1 <= n <= MAX_BROKER_ID:
            return f"broker ids are 1-{MAX_BROKER_ID}"
        port = self.args.base_port + n - 1
        if port > 65535:
            return f"broker {n} would listen on port {port}"
        b = self.broker(n)
        if b.running:
            return f"broker {n} is already running (pid {b.proc.pid})"  # type: ignore[union-attr]
        if listening(port):
            return f"port {port} (broker {n}) is already in use"
        cmd = [
            sys.executable, "-m", "chronik", "serve",
            "--data-dir", str(b.data_dir),
            "--listen", f"127.0.0.1:{port}",
            "--set", f"zookeeper.connect={self.zk_connect}",
            "--set", f"broker.id={n}",
            "--set", f"zookeeper.session.timeout.ms={SESSION_TIMEOUT_MS}",
        ]
        for setting in self.args.set:
            cmd += ["--set", setting]
        with open(b.log_path, "ab") as log:
            # A session of its own: Ctrl-C reaches this script only, which stops the
            # brokers before ZooKeeper so that they deregister cleanly.
            b.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                      start_new_session=True)
        control.write_atomically(b.pid_path, f"{b.proc.pid}\n")
        b.up, b.stop_sent_at, b.asked_to = False, None, None
        return None

    def signal_broker(self, b: Broker, signum: signal.Signals) -> None:
        assert b.proc is not None
        if signum == signal.SIGTERM and b.stop_sent_at is None:
            b.stop_sent_at = time.monotonic()
        with contextlib.suppress(ProcessLookupError):
            b.proc.send_signal(signum)

    def answer(self, b: Broker, ok: bool, message: str) -> None:
        for request_id in b.waiting:
            control.reply(self.base, request_id, ok, message)
        b.waiting.clear()

    def watch(self) -> None:
        """Notice brokers that came up, exited, or ignore a stop for too long."""
        for b in list(self.brokers.values()):
            if b.proc is None:
                continue
            returncode = b.proc.poll()
            if returncode is not None:
                self.exited(b, returncode)
            elif not b.up and listening(b.port):
                b.up = True
                line = (f"broker {b.id} on 127.0.0.1:{b.port} (pid {b.proc.pid}), data in "
                        f"{b.data_dir}, log in {b.log_path}")
                print(line, flush=True)
                self.answer(b, True, line)
            elif (b.stop_sent_at is not None
                  and time.monotonic() - b.stop_sent_at > STOP_GRACE_S):
                self.signal_broker(b, signal.SIGKILL)

    def exited(self, b: Broker, returncode: int) -> None:
        b.proc, b.up = None, False
        b.pid_path.unlink(missing_ok=True)
        how = how_it_ended(returncode)
        if self.stopping:
            return
        if not self.greeted:
            print(f"broker {b.id} exited ({how}) before it was up; see {b.log_path}",
                  file=sys.stderr, flush=True)
            return
        asked_to, b.asked_to = b.asked_to, None
        if asked_to == "restart":
            print(f"broker {b.id} stopped ({how}) to be restarted", flush=True)
            reason = self.start(b.id)
            if reason is not None:
                self.answer(b, False, reason)
            return
        if asked_to == "stop":
            what = "stopped"
        elif asked_to is None and returncode == 0:
            what = "exited"
        else:
            what = "died"
        line = (f"broker {b.id} {what} ({how}); its log: {b.log_path}; "
                f"start it again: {self.hint(f'start {b.id}')}")
        print(line, flush=True)
        self.answer(b, True, line)

    def handle(self, request: control.Request) -> None:
        n = request.broker
        if request.action == "status":
            control.reply(self.base, request.id, True, self.status())
            return
        assert n is not None
        b = self.brokers.get(n)
        if request.action == "start" or (request.action == "restart" and not
                                         (b is not None and b.running)):
            reason = self.start(n)
            if reason is not None:
                control.reply(self.base, request.id, False, reason)
            else:
                self.broker(n).waiting.append(request.id)
            return
        if b is None or not b.running:
            control.reply(self.base, request.id, False,
                          f"broker {n} is not running; {self.hint(f'start {n}')} starts it")
            return
        if b.asked_to is None or request.action == "kill":
            b.asked_to = request.action
            self.signal_broker(b, signal.SIGKILL if request.action == "kill"
                               else signal.SIGTERM)
        b.waiting.append(request.id)

    def status(self) -> str:
        lines = [f"ZooKeeper on {self.zk_connect}; bootstrap servers {self.bootstrap()}"]
        for n in sorted(self.brokers):
            b = self.brokers[n]
            state = ("up" if b.up else "starting") if b.proc is not None else "not running"
            pid = f", pid {b.proc.pid}" if b.proc is not None else ""
            lines.append(f"broker {n} on 127.0.0.1:{b.port}: {state}{pid}")
        return "\n".join(lines)

    def bootstrap(self) -> str:
        running = [b for _, b in sorted(self.brokers.items()) if b.running] or [
            b for _, b in sorted(self.brokers.items())]
        return ",".join(f"127.0.0.1:{b.port}" for b in running)

    def greet(self) -> None:
        bootstrap = self.bootstrap()
        chronik_script = Path(sys.executable).absolute().with_name("chronik")
        chronik = (shlex.quote(shown_path(chronik_script)) if chronik_script.exists()
                   else f"{shlex.quote(shown_path(Path(sys.executable)))} -m chronik")
        b = f"--bootstrap-server {bootstrap}"
        last, new = max(self.brokers), max(self.brokers) + 1
        pid_file = shown_path(self.broker(last).pid_path)
        commands = [
            (self.hint(f"kill {last}"), f"SIGKILL (or: kill -9 $(cat {pid_file}))"),
            (self.hint(f"stop {last}"), "SIGTERM, a clean stop"),
            (self.hint(f"start {last}"), "again, with the same data dir, port and settings"),
            (self.hint(f"restart {last}"), "stop, then start"),
            (self.hint(f"start {new}"), f"a new broker {new} on "
             f"127.0.0.1:{self.args.base_port + new - 1}, data in "
             f"{shown_path(self.base / f'broker-{new}')}"),
            (self.hint("status"), "which brokers run, and their pids"),
        ]
        width = max(len(c) for c, _ in commands) + 3
        kept = sorted(
            int(p.name.removeprefix("broker-")) for p in self.base.glob("broker-*")
            if p.is_dir() and p.name.removeprefix("broker-").isdigit()
            and int(p.name.removeprefix("broker-")) not in self.brokers
        )
        lines = [
            "",
            f"The cluster is up. Bootstrap servers: {bootstrap}",
            "Try:",
            f"  {chronik} cluster describe {b}",
            f"  {chronik} topics create demo --partitions 6 --replication-factor 3 "
            f"--config min.insync.replicas=2 {b}",
            f"  {chronik} topics describe demo {b}",
            f"  zkCli.sh -server {self.zk_connect} ls /brokers/ids   "
            "(Debian: /usr/share/zookeeper/bin/zkCli.sh)",
            "Kill, stop and start a broker from another terminal (a killed broker's "
            f"partitions fail over after about {SESSION_TIMEOUT_MS // 1000} s, the ZooKeeper "
            "session timeout):",
            *(f"  {c.ljust(width)}{what}" for c, what in commands),
        ]
        if not self.dir_option:
            lines.append(f"  (or: make cluster-broker N={last} ACTION=kill)")
        if kept:
            lines.append(
                f"Broker{'s' if len(kept) > 1 else ''} {', '.join(map(str, kept))} of an "
                f"earlier run kept {'their' if len(kept) > 1 else 'its'} data: "
                f"{self.hint(f'start {kept[0]}')} brings it back."
            )
        lines += [
            "Move partitions onto new brokers, or off a broker before removing it:",
            f"  {chronik} cluster rebalance {b} [--dry-run]",
            f"  {chronik} cluster decommission {last} {b}",
            "Ctrl-C stops the brokers, then ZooKeeper.",
        ]
        print("\n".join(lines), flush=True)
        self.greeted = True

    def run(self) -> int:
        """Start the first brokers, then watch them and serve commands until stopped."""
        if self.stopping:
            return 0
        first = [self.broker(n) for n in range(1, self.args.brokers + 1)]
        for b in first:
            reason = self.start(b.id)
            if reason is not None:
                print(reason, file=sys.stderr)
                return 1
        while not self.stopping:
            if self.greeted:
                for request in control.take_requests(self.base):
                    self.handle(request)
            self.watch()
            if not self.greeted:
                if any(not b.running for b in first):
                    return 1
                if all(b.up for b in first):
                    self.greet()
            time.sleep(0.1)
        print("\nstopping", flush=True)
        return 0

    def stop_all(self) -> None:
        """SIGTERM every broker and wait for all of them (SIGKILL after the grace time)."""
        self.stopping = True
        for b in self.brokers.values():
            if b.running:
                self.signal_broker(b, signal.SIGTERM)
        while any(b.running for b in self.brokers.values()):
            self.watch()
            time.sleep(0.05)
        for b in self.brokers.values():
            self.answer(b, False, "the cluster stopped")
        for request in control.take_requests(self.base):
            control.reply(self.base, request.id, False, "the cluster stopped")


def supervise(args: argparse.Namespace) -> int:
    from chronik.cluster.zookeeper_process import ZooKeeperProcess, ZooKeeperUnavailable

    base = args.dir.resolve()
    base.mkdir(parents=True, exist_ok=True)
    other = control.running_supervisor(base)
    if other is not None:
        print(f"a cluster is already running from {base} (pid {other})", file=sys.stderr)
        return 1
    for port in [args.zookeeper_port] + [args.base_port + i for i in range(args.brokers)]:
        if listening(port):
            print(f"port {port} is already in use; is a cluster already running?", file=sys.stderr)
            return 1

    supervisor = Supervisor(args)

    def on_signal(signum: int, frame: object) -> None:
        supervisor.stopping = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    control.write_atomically(control.supervisor_pid_path(base), f"{os.getpid()}\n")
    shutil.rmtree(control.control_dir(base), ignore_errors=True)  # an earlier run's requests
    control.control_dir(base).mkdir()
    zk = ZooKeeperProcess(base / "zookeeper", args.zookeeper_port)
    try:
        try:
            zk.start()
        except ZooKeeperUnavailable as exc:
            print(f"{exc}; `make deps` (scripts/install-test-deps.sh) installs it",
                  file=sys.stderr)
            return 1
        print(f"ZooKeeper on {zk.connect}, data in {zk.data_dir}", flush=True)
        return supervisor.run()
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        supervisor.stop_all()
        zk.stop()
        shutil.rmtree(control.control_dir(base), ignore_errors=True)
        control.supervisor_pid_path(base).unlink(missing_ok=True)


def command(args: argparse.Namespace) -> int:
    base = args.dir.resolve()
    try:
        ok, message = control.ask(base, args.action, args.broker,
                                  COMMAND_TIMEOUT_S[args.action])
    except control.NotRunning as exc:
        print(f"{exc} (start it with `make cluster`, or scripts/cluster.py "
              "with the same --dir)", file=sys.stderr)
        return 1
    print(message, file=sys.stdout if ok else sys.stderr)
    return 0 if ok else 1


def main() -> int:
    args = parse_args()
    return supervise(args) if args.action is None else command(args)


if __name__ == "__main__":
    sys.exit(main())
