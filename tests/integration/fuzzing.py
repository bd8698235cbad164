"""A fuzzing campaign against a live `chronik serve` process.

The broker is asked which APIs and versions it serves; the campaign cycles through
every one of them, sending frames from `fuzz_frames` (one connection per frame), and
after each batch checks that the process is alive and answers ApiVersions, that a
real client (confluent-kafka) still round-trips a record, and that the records
produced before the campaign still read back byte-identical at the same offsets.

A crash is narrowed down to its frame by replaying the last few frames one by one
against the restarted broker; the broker is restarted and the campaign goes on.
Every finding (crash, wedged broker, lost or changed data, a traceback in the
broker's log) is saved as a replayable `.hex` file (see `write_frames`): copied
into `fuzz_regressions/`, it becomes a regression test.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import re
import socket
import struct
import subprocess
import time
import uuid
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.create_topics.v7.request import (
    CreatableTopic,
    CreatableTopicConfig,
    CreateTopicsRequest,
)
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from tests.conftest import BrokerProcess

from .fuzz_frames import MUTATIONS, Frame, Fuzzer, Pools
from .helpers import RawClient, confluent_produce, create_topic, fetch_raw, sample_records

# A compacted topic too: its appends decompress and check keys, a path of their own.
FUZZ_TOPICS = {"fuzz-0": {}, "fuzz-1": {"cleanup.policy": "compact"}}
FUZZ_PARTITIONS = 3
# Never named by generated requests: their contents must survive the campaign.
CANARY = "canary-d41d8c"
ROUND_TRIP = "roundtrip-8f00b2"
CANARY_PARTITIONS = 2
# Liveness checks on a loaded machine: generous, a wedged broker still fails them.
LIVENESS_TIMEOUT = 60.0
SUSPECTS = 4
# Bad input gets an error code or one log line; a request with a few dozen entities
# may log one line each, but not more than this.
NOISY_LINES = 50


@dataclass
class Settings:
    seconds: float
    seed: int
    findings: Path
    frames: int = 0  # stop after this many frames (0: only the clock stops the run)
    batch: int = 25
    restart_every: int = 40  # batches between clean restarts (SIGTERM, start again)
    skip: tuple[str, ...] = ()
    skip_apis: tuple[int, ...] = ()
    read_timeout: float = 0.3

    @classmethod
    def from_env(cls, seconds: float, seed: int, findings: Path, frames: int = 0) -> Settings:
        skip = tuple(s for s in os.environ.get("FUZZ_SKIP", "").split(",") if s)
        unknown = set(skip) - set(MUTATIONS)
        if unknown:
            raise ValueError(f"FUZZ_SKIP: unknown mutations {sorted(unknown)}; know {MUTATIONS}")
        return cls(
            seconds=float(os.environ.get("FUZZ_SECONDS", seconds)),
            frames=int(os.environ.get("FUZZ_FRAMES", frames)),
            seed=int(os.environ.get("FUZZ_SEED", seed)),
            findings=Path(os.environ.get("FUZZ_FINDINGS", findings)),
            skip=skip,
            skip_apis=tuple(int(k) for k in os.environ.get("FUZZ_SKIP_APIS", "").split(",") if k),
        )


@dataclass
class Finding:
    kind: str  # crash, wedged, data, traceback
    signature: str
    path: Path
    count: int = 1


@dataclass
class Report:
    seed: int
    sent: int = 0
    batches: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    mutations: Counter[str] = field(default_factory=Counter)
    served: list[tuple[int, int]] = field(default_factory=list)
    covered: set[tuple[int, int]] = field(default_factory=set)
    findings: dict[tuple[str, str, int | None], Finding] = field(default_factory=dict)
    tracebacks: int = 0

    @property
    def ok(self) -> bool:
        return not self.findings

    def summary(self) -> str:
        lines = [
            f"fuzz seed {self.seed}: {self.sent} frames in {self.batches} batches, "
            f"{len(self.covered)}/{len(self.served)} api versions, "
            f"outcomes {dict(self.outcomes)}, tracebacks in log {self.tracebacks}",
        ]
        for f in self.findings.values():
            lines.append(f"  {f.kind} x{f.count}: {f.signature}\n    saved {f.path}")
        return "\n".join(lines)


def write_frames(path: Path, header: dict[str, Any], frames: list[Frame]) -> None:
    """The replay format: `#` comment lines, then one hex line per frame (size prefix
    included), each after a `# frame:` line saying what it is."""
    lines = [f"# {k}: {v}" for k, v in header.items()]
    for frame in frames:
        lines.append(
            f"# frame: api {frame.api_key} v{frame.api_version} {frame.mutation} {frame.note}"
        )
        lines.append(frame.data.hex())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def read_frames(path: Path) -> list[bytes]:
    lines = path.read_text().splitlines()
    return [bytes.fromhex(line) for line in lines if line.strip() and not line.startswith("#")]


def send_frame(port: int, data: bytes, read_timeout: float) -> str:
    """answered, closed (by the broker) or silent (no answer within the timeout)."""
    try:
        sock = socket.create_connection(("127.0.0.1", port), timeout=LIVENESS_TIMEOUT)
    except OSError:
        return "refused"
    with sock:
        try:
            sock.sendall(data)
        except OSError:
            return "closed"
        sock.settimeout(read_timeout)
        got = bytearray()
        try:
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    return "closed"
                got += chunk
                if len(got) >= 4 and len(got) >= 4 + struct.unpack_from(">i", got)[0]:
                    return "answered"
        except TimeoutError:
            return "silent"
        except OSError:
            return "closed"


_FATAL = re.compile(r"memory allocation|panicked|Fatal Python error|Segmentation|Killed|Error")
_TB_LOCATION = re.compile(r'File ".*?([^/"]+\.py)", line \d+, in (\S+)')


def traceback_signatures(text: str) -> list[str]:
    """One signature per traceback: the exception type and the innermost frame."""
    out = []
    for block in text.split("Traceback (most recent call last):")[1:]:
        lines = block.splitlines()
        location = "?"
        exc = "?"
        for line in lines[1:]:
            m = _TB_LOCATION.search(line)
            if m:
                location = f"{m.group(1)}:{m.group(2)}"
            elif line and not line.startswith(" "):
                exc = line.split(":", 1)[0]
                break
        out.append(f"{exc} in {location}")
    return out


def api_versions(port: int) -> list[tuple[int, int, int]]:
    with RawClient(f"127.0.0.1:{port}") as raw:
        raw.sock.settimeout(LIVENESS_TIMEOUT)
        response = raw.request(
            ApiVersionsRequest(client_software_name="fuzz", client_software_version="1")
        )
    assert int(response.error_code) == 0
    return [(int(k.api_key), int(k.min_version), int(k.max_version)) for k in response.api_keys]


def prepare_topics(bootstrap: str) -> list[uuid.UUID]:
    """The topics generated requests name (created again when a request deleted
    them, so later requests reach past the topic lookup); returns their topic ids."""
    with RawClient(bootstrap) as raw:
        raw.sock.settimeout(LIVENESS_TIMEOUT)
        raw.request(
            CreateTopicsRequest(
                topics=tuple(
                    CreatableTopic(
                        name=n,
                        num_partitions=FUZZ_PARTITIONS,
                        replication_factor=1,
                        assignments=(),
                        configs=tuple(
                            CreatableTopicConfig(name=k, value=v) for k, v in configs.items()
                        ),
                    )
                    for n, configs in FUZZ_TOPICS.items()
                ),
                timeout=datetime.timedelta(seconds=30),
                validate_only=False,
            )
        )
        response = raw.request(
            MetadataRequest(
                topics=tuple(MetadataRequestTopic(topic_id=None, name=n) for n in FUZZ_TOPICS),
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            )
        )
    return [t.topic_id for t in response.topics if t.topic_id is not None]


class Campaign:
    def __init__(self, broker: BrokerProcess, settings: Settings) -> None:
        self.broker = broker
        self.settings = settings
        self.report = Report(seed=settings.seed)
        self.log_pos = 0
        self.suspects: deque[Frame] = deque(maxlen=SUSPECTS)
        self.canary: list[bytes] = []
        self.producer: Any = None
        self.consumer: Any = None
        self.round_trips = 0
        self.pools = Pools(list(FUZZ_TOPICS))

    # --- setup and checks -------------------------------------------------------------

    def setup(self) -> Fuzzer:
        bootstrap = self.broker.bootstrap
        topic_ids = prepare_topics(bootstrap)
        create_topic(bootstrap, CANARY, CANARY_PARTITIONS)
        create_topic(bootstrap, ROUND_TRIP, 1)
        records = sample_records(40, seed=self.settings.seed)
        confluent_produce(bootstrap, CANARY, records, acks="all")
        with RawClient(bootstrap) as raw:
            self.canary = [fetch_raw(raw, CANARY, p) for p in range(CANARY_PARTITIONS)]
        assert all(self.canary), "canary records not readable before fuzzing"
        self._open_clients()
        self.pools.topic_ids[:] = topic_ids
        self.report.served = [
            (k, v) for k, low, high in api_versions(self.broker.port) for v in range(low, high + 1)
        ]
        return Fuzzer(self.settings.seed, self.pools, self.settings.skip)

    def _open_clients(self) -> None:
        from confluent_kafka import Consumer, Producer, TopicPartition

        common = {"bootstrap.servers": self.broker.bootstrap, "log_level": 2}
        self.producer = Producer({**common, "acks": "all", "linger.ms": 0})
        self.consumer = Consumer(
            {
                **common,
                "group.id": "fuzz-reader",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 10,
            }
        )
        self.consumer.assign([TopicPartition(ROUND_TRIP, 0, 0)])

    def close(self) -> None:
        if self.consumer is not None:
            self.consumer.close()
            self.consumer = None
        if self.producer is not None:
            self.producer.flush(5)
            self.producer = None

    def check(self) -> str | None:
        """What is wrong with the broker after a batch, or None."""
        if self.broker.proc is None or self.broker.proc.poll() is not None:
            return "crashed"
        try:
            api_versions(self.broker.port)
        except Exception as exc:
            return f"wedged: ApiVersions failed ({exc!r})"
        problem = self._round_trip()
        if problem:
            return problem
        try:
            with RawClient(self.broker.bootstrap) as raw:
                raw.sock.settimeout(LIVENESS_TIMEOUT)
                now = [fetch_raw(raw, CANARY, p) for p in range(CANARY_PARTITIONS)]
        except Exception as exc:
            return f"data: canary fetch failed ({exc!r})"
        for p, (before, after) in enumerate(zip(self.canary, now, strict=True)):
            if before != after:
                return f"data: canary partition {p} changed ({len(before)} -> {len(after)} bytes)"
        try:
            self.pools.topic_ids[:] = prepare_topics(self.broker.bootstrap)
        except Exception as exc:
            return f"wedged: CreateTopics failed ({exc!r})"
        return None

    def _round_trip(self) -> str | None:
        self.round_trips += 1
        value = f"rt-{self.settings.seed}-{self.round_trips}".encode()
        delivered: list[Any] = []
        self.producer.produce(
            ROUND_TRIP, key=b"k", value=value, on_delivery=lambda e, m: delivered.append((e, m))
        )
        self.producer.flush(LIVENESS_TIMEOUT)
        if not delivered or delivered[0][0] is not None:
            return f"wedged: round-trip produce failed ({delivered})"
        offset = delivered[0][1].offset()
        deadline = time.monotonic() + LIVENESS_TIMEOUT
        while time.monotonic() < deadline:
            for msg in self.consumer.consume(num_messages=100, timeout=0.5):
                if msg.error() is not None:
                    continue
                if msg.offset() == offset:
                    if msg.value() != value or msg.key() != b"k":
                        return f"data: round trip read {msg.key()!r}/{msg.value()!r} at {offset}"
                    return None
        return f"wedged: round-trip record at offset {offset} not read back"

    # --- the loop -----------------------------------------------------------------------

    def run(self) -> Report:
        fuzzer = self.setup()
        self._new_log()
        schedule = [kv for kv in self.report.served if kv[0] not in self.settings.skip_apis]
        fuzzer.rnd.shuffle(schedule)
        deadline = time.monotonic() + self.settings.seconds
        i = 0
        try:
            while time.monotonic() < deadline and not self._enough():
                batch: list[Frame] = []
                for _ in range(self.settings.batch):
                    api_key, version = schedule[i % len(schedule)]
                    i += 1
                    frame = fuzzer.frame(api_key, version)
                    batch.append(frame)
                    if not self._send(frame):
                        break
                self.report.batches += 1
                if self.report.batches % self.settings.restart_every == 0:
                    self._clean_restart(batch)
                problem = self.check()
                if problem == "crashed":
                    self._crashed()
                elif problem is not None:
                    self._record(problem.split(":", 1)[0], problem, batch)
                    if problem.startswith("data"):
                        break
                    self._restart()
        finally:
            self.close()
            self._scan_log(None)
        return self.report

    def _enough(self) -> bool:
        return 0 < self.settings.frames <= self.report.sent

    def _clean_restart(self, batch: list[Frame]) -> None:
        """SIGTERM must exit 0, and whatever the frames left behind must not stop a start."""
        self.close()
        assert self.broker.proc is not None
        if self.broker.proc.poll() is not None:
            return  # a crash: check() reports it
        try:
            code = self.broker.terminate(LIVENESS_TIMEOUT)
        except subprocess.TimeoutExpired:
            code = None
        if code != 0:
            self._record("restart", f"SIGTERM exit {code}: {self._exit_reason()}", batch)
        self.broker.kill()
        try:
            self.broker.start()
        except (RuntimeError, TimeoutError):
            self._record("restart", f"no start after restart: {self._exit_reason()}", batch)
            raise
        self._new_log()
        self._open_clients()

    def _send(self, frame: Frame) -> bool:
        """Send one frame; False once the broker is found dead."""
        self.suspects.append(frame)
        outcome = send_frame(self.broker.port, frame.data, self.settings.read_timeout)
        self.report.sent += 1
        self.report.outcomes[outcome] += 1
        self.report.mutations[frame.mutation] += 1
        self.report.covered.add((frame.api_key, frame.api_version))
        self._scan_log(frame)
        if outcome in ("closed", "refused"):
            return self.broker.proc is not None and self.broker.proc.poll() is None
        return True

    def _scan_log(self, frame: Frame | None) -> None:
        new = self._new_log()
        signatures = traceback_signatures(new)
        for signature in signatures:
            self.report.tracebacks += 1
            self._record("traceback", signature, [frame] if frame else [])
        lines = new.count("\n")
        if not signatures and lines > NOISY_LINES:
            first = new.splitlines()[0][24:120] if new else ""
            signature = f"{lines} log lines after one frame: {first}"
            self._record("noisy", signature, [frame] if frame else [])

    def _new_log(self) -> str:
        try:
            with open(self.broker.log_path, "rb") as f:
                f.seek(self.log_pos)
                data = f.read()
        except FileNotFoundError:
            return ""
        self.log_pos += len(data)
        return data.decode(errors="replace")

    def _record(self, kind: str, signature: str, frames: list[Frame]) -> None:
        first = frames[-1] if frames else None
        # Crashes are kept per API too: one cause often shows in many decoders.
        api = first.api_key if first is not None and kind == "crash" else None
        key = (kind, re.sub(r"\d+", "N", signature), api)
        found = self.report.findings.get(key)
        if found is not None:
            found.count += 1
            return
        name = f"{kind}-{len(self.report.findings):03d}"
        if first is not None:
            name += f"-k{first.api_key}v{first.api_version}"
        path = self.settings.findings / f"{name}-seed{self.settings.seed}.hex"
        write_frames(
            path, {"kind": kind, "signature": signature, "seed": self.settings.seed}, frames
        )
        self.report.findings[key] = Finding(kind, signature, path)

    def _exit_reason(self) -> str:
        proc = self.broker.proc
        code = proc.returncode if proc is not None else None
        tail = [ln for ln in self.broker.log_text().splitlines()[-300:] if ln.strip()]
        telling = [ln for ln in tail if _FATAL.search(ln)]
        last = (telling or tail or [""])[-1]
        return f"exit {code}: {re.sub(r'[0-9]+', 'N', last.strip())}"

    def _crashed(self) -> None:
        """Restart, then replay the last frames one by one to find the one that kills it."""
        assert self.broker.proc is not None
        self.broker.proc.wait(LIVENESS_TIMEOUT)
        reason = self._exit_reason()
        suspects = list(self.suspects)
        self.suspects.clear()
        self._restart()
        culprit = suspects
        for frame in reversed(suspects):
            send_frame(self.broker.port, frame.data, 1.0)
            with contextlib.suppress(subprocess.TimeoutExpired):
                assert self.broker.proc is not None
                self.broker.proc.wait(1.0)
            if self.broker.proc.poll() is not None:
                reason = self._exit_reason()
                culprit = [frame]
                self._restart()
                break
        self._record("crash", reason, culprit)

    def _restart(self) -> None:
        self.close()
        self.broker.kill()
        self.broker.start()
        self._new_log()
        self._open_clients()


def run_campaign(
    settings: Settings, workdir: Path, config: dict[str, str] | None = None
) -> Report:
    """``config``: the broker's settings, e.g. a cluster member's zookeeper.connect."""
    broker = BrokerProcess(workdir / "data", config)
    broker.start()
    try:
        return Campaign(broker, settings).run()
    finally:
        broker.kill()
        if settings.findings.exists():
            with contextlib.suppress(OSError):
                (settings.findings / "broker.log").write_text(broker.log_text())

