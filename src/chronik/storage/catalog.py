# The topics on disk. Layout under the data directory:
#   {topic}-{partition}/     one partition log each (chronik.storage.partition_log)
#   .meta/{topic}.json       {"name": str, "topic_id": uuid str, "partitions": int,
#                             "configs": {topic config overrides},
#                             "local": [int, ...] (cluster mode only: the partitions
#                             stored on this broker; absent: all of them)}, replaced
#                             atomically (write tmp, fsync, rename, fsync dir)
# The .meta file is the truth: a partition directory without one (a deletion cut short
# by a crash, or a creation) is removed at load, if it holds only files chronik writes
# there (segments, indexes, snapshots and their temporary .cleaned/.swap/.tmp copies), as
# is every {topic}-{partition}.{32 hex digits}-delete directory a deletion left
# (PartitionLog.delete). New partitions are opened first and the .meta file written last,
# so a topic or a partition count appears whole or not at all. Deleting a topic removes
# its .meta file first (then fsyncs .meta), then its partitions.
from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import shutil
import time
import uuid
from collections.abc import Generator, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chronik.storage import hw_checkpoint
from chronik.storage.config import LogConfig, validate_topic_configs
from chronik.storage.diskio import fsync_dir
from chronik.storage.errors import (
    InvalidPartitions,
    InvalidTopicName,
    KafkaStorageError,
    PolicyViolation,
    TopicExists,
    UnknownTopicOrPartition,
)
from chronik.storage.partition_log import DELETE_SUFFIX, PartitionLog

_log = logging.getLogger("chronik.storage")

META_DIR = ".meta"
MAX_TOPIC_NAME = 249
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")
_PARTITION_DIR = re.compile(r"^(.+)-(\d+)$")
# Kafka's internal topics, which the broker creates for itself: never refused for the
# partition limit, or the groups of a full broker would stop working.
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
_DELETED_DIR = re.compile(r"^.+\.[0-9a-f]{32}" + re.escape(DELETE_SUFFIX) + "$")
# The files a partition directory may hold, temporaries included.
_LOG_FILE = re.compile(
    r"^(\d{20}\.(log|index|timeindex|snapshot|txnindex)(\.cleaned|\.swap|\.tmp)?"
    r"|log-start-offset(\.tmp)?|leader-epoch-checkpoint(\.tmp)?|\.clean-shutdown"
    r"|key-versions\.db(-wal|-shm|-journal)?)$"
)


def validate_topic_name(name: str) -> None:
    """Kafka's rule: 1..249 of [a-zA-Z0-9._-], and not "." or ".."."""
    if not name:
        raise InvalidTopicName("Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise InvalidTopicName("Topic name cannot be \".\" or \"..\"")
    if len(name) > MAX_TOPIC_NAME:
        raise InvalidTopicName(
            f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME} characters"
        )
    if not _LEGAL.match(name):
        raise InvalidTopicName(
            f"Topic name {name} is illegal, it contains a character other than "
            "ASCII alphanumerics, '.', '_' and '-'"
        )


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


def _collision_key(name: str) -> str:
    return name.replace(".", "_")



@dataclass
class Topic:
    name: str
    topic_id: uuid.UUID
    configs: dict[str, str]
    log_config: LogConfig
    # Indexed by partition. In cluster mode the partitions stored on other brokers are
    # None; on a single node every entry is a log.
    partitions: list[PartitionLog | None] = field(default_factory=list)  # type: ignore[assignment]
    sparse: bool = False

    @property
    def is_internal(self) -> bool:
        return self.name.startswith("__")

    def local_logs(self) -> list[PartitionLog]:
        return [log for log in self.partitions if log is not None]

    def log(self, partition: int) -> PartitionLog | None:
        if 0 <= partition < len(self.partitions):
            return self.partitions[partition]
        return None


# Time spent creating partitions between two turns of the event loop. Each partition
# costs a directory and a file, from well under a millisecond to several on a busy disk,
# so the pause is measured rather than counted.
SECONDS_PER_TURN = 0.01


async def run_stepwise(steps: Generator[None, None, Any]) -> Any:
    """Drive a catalog change made of one step per partition, letting the event loop serve
    other connections every SECONDS_PER_TURN. Abandoned (the task cancelled), the change is
    undone by closing it."""
    turn_started = time.monotonic()
    try:
        while True:
            try:
                next(steps)
            except StopIteration as finished:
                return finished.value
            if time.monotonic() - turn_started >= SECONDS_PER_TURN:
                await asyncio.sleep(0)
                turn_started = time.monotonic()
    finally:
        steps.close()


def run_steps(steps: Generator[None, None, Topic]) -> Topic:
    """Drive a stepwise change (``create_topic_steps``, ...) to its end at once."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value


class Catalog:
    def __init__(
        self,
        data_dir: Path,
        broker_configs: Mapping[str, str] | None = None,
        *,
        max_partitions: int | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.broker_configs: dict[str, str] = dict(broker_configs or {})
        self.topics: dict[str, Topic] = {}
        self._meta = self.data_dir / META_DIR
        # max.broker.partitions: partitions of every topic together (None: no limit).
        self.max_partitions = max_partitions
        self._changing: dict[str, int] = {}  # topics being created or grown: partitions added

    # -- load / close -------------------------------------------------------------------------
    def load(self) -> None:
        """Open every topic's partitions (each recovers its own tail)."""
        self._meta.mkdir(parents=True, exist_ok=True)
        for tmp in self._meta.glob("*.tmp"):
            tmp.unlink()
        for path in sorted(self._meta.glob("*.json")):
            meta = json.loads(path.read_text())
            name = meta["name"]
            log_config = LogConfig.from_configs(self.broker_configs, meta["configs"])
            topic = Topic(name, uuid.UUID(meta["topic_id"]), dict(meta["configs"]), log_config)
            local = meta.get("local")
            topic.sparse = local is not None
            wanted = set(range(meta["partitions"]) if local is None else local)
            topic.partitions = [
                PartitionLog.open(self._partition_dir(name, p), log_config)
                if p in wanted
                else None
                for p in range(meta["partitions"])
            ]
            self.topics[name] = topic
        for (name, partition), hw in hw_checkpoint.read(self.data_dir).items():
            topic = self.topics.get(name)
            plog = topic.log(partition) if topic is not None else None
            if plog is not None:
                plog.restore_high_watermark(hw)
        self._remove_orphans()

    def hw_checkpoint_rows(self) -> list[tuple[str, int, int]]:
        """(topic, partition, high watermark) of every replicated log, as of now."""
        return [
            (name, p, plog.high_watermark)
            for name, topic in self.topics.items()
            for p, plog in enumerate(topic.partitions)
            if plog is not None and plog.replicated and not plog.closed
        ]

    def write_hw_checkpoint(self, rows: list[tuple[str, int, int]] | None = None) -> None:
        """Every replicated log's high watermark (``rows``, taken earlier, or now), in
        Kafka's checkpoint file. Safe on a worker thread given ``rows``."""
        hw_checkpoint.write(self.data_dir, self.hw_checkpoint_rows() if rows is None else rows)

    def _remove_orphans(self) -> None:
        for entry in self.data_dir.iterdir():
            if not entry.is_dir():
                continue
            if _DELETED_DIR.match(entry.name):
                shutil.rmtree(entry, ignore_errors=True)
                continue
            m = _PARTITION_DIR.match(entry.name)
            if not m:
                continue
            topic = self.topics.get(m.group(1))
            orphan = topic is None or topic.log(int(m.group(2))) is None
            if orphan and all(_LOG_FILE.match(f.name) for f in entry.iterdir()):
                shutil.rmtree(entry, ignore_errors=True)

    def close(self) -> None:
        """Close every partition; those that could not finish cleanly (full disk, I/O
        error) are named in one log line and recovered at the next start."""
        unclean: list[tuple[str, str]] = []
        for topic in self.topics.values():
            for log in topic.local_logs():
                problem = log.close()
                if problem is not None:
                    unclean.append((log.name, problem))
        if unclean:
            names = ", ".join(name for name, _ in unclean[:5])
            more = f" and {len(unclean) - 5} more" if len(unclean) > 5 else ""
            _log.warning(
                "%d partitions not closed cleanly (%s): %s%s; they are recovered at the next "
                "start",
                len(unclean),
                unclean[0][1],
                names,
                more,
            )

    # -- queries --------------------------------------------------------------------------------
    def get(self, name: str) -> Topic | None:
        return self.topics.get(name)

    def partition(self, name: str, partition: int) -> PartitionLog:
        topic = self.topics.get(name)
        log = None if topic is None else topic.log(partition)
        if log is None:
            raise UnknownTopicOrPartition(
                f"This server does not host this topic-partition: {name}-{partition}"
            )
        return log

    def _partition_dir(self, name: str, partition: int) -> Path:
        return self.data_dir / f"{name}-{partition}"

    @property
    def partition_count(self) -> int:
        """Partitions of every topic, counting those being created now."""
        existing = sum(len(t.local_logs()) for t in self.topics.values())
        return existing + sum(self._changing.values())

    def _check_partition_limit(self, name: str, adding: int) -> None:
        limit = self.max_partitions
        if limit is None or name in INTERNAL_TOPICS:
            return
        total = self.partition_count
        if total + adding > limit:
            raise PolicyViolation(
                f"Adding {adding} partitions would bring this broker to {total + adding}, "
                f"over its limit of {limit} (max.broker.partitions)."
            )

    def _new_partition(self, name: str, partition: int, config: LogConfig) -> PartitionLog:
        path = self._partition_dir(name, partition)
        if path.exists():  # leftovers of an earlier topic of the same name
            shutil.rmtree(path)
        return PartitionLog.open(path, config)

    # -- changes --------------------------------------------------------------------------------
    def create_topic(
        self,
        name: str,
        num_partitions: int,
        configs: Mapping[str, str] | None = None,
        *,
        validate_only: bool = False,
        topic_id: uuid.UUID | None = None,
    ) -> Topic:
        steps = self.create_topic_steps(
            name, num_partitions, configs, validate_only=validate_only, topic_id=topic_id
        )
        return run_steps(steps)

    def create_topic_steps(
        self,
        name: str,
        num_partitions: int,
        configs: Mapping[str, str] | None = None,
        *,
        validate_only: bool = False,
        topic_id: uuid.UUID | None = None,
    ) -> Generator[None, None, Topic]:
        """``create_topic`` one partition per step, so a caller on an event loop can serve
        others in between. The topic exists, whole, only after the last step; closing the
        generator early removes what it made."""
        configs = dict(configs or {})
        validate_topic_name(name)
        if name in self.topics or name in self._changing:
            raise TopicExists(f"Topic '{name}' already exists.")
        for other in self.topics:
            if _collision_key(other) == _collision_key(name):
                raise InvalidTopicName(
                    f"Topic '{name}' collides with existing topic: {other}"
                )
        if num_partitions <= 0:
            raise InvalidPartitions("Number of partitions must be larger than 0.")
        validate_topic_configs(configs)
        log_config = LogConfig.from_configs(self.broker_configs, configs)
        self._check_partition_limit(name, num_partitions)
        topic = Topic(name, topic_id or uuid.uuid4(), configs, log_config)
        if validate_only:
            return topic
        self._meta.mkdir(parents=True, exist_ok=True)
        self._changing[name] = num_partitions
        try:
            for p in range(num_partitions):
                topic.partitions.append(self._new_partition(name, p, log_config))
                yield
            self._write_meta(topic)
        except BaseException as exc:
            # No half-made topic: without its .meta file it would be gone at restart.
            for log in topic.partitions:
                log.delete()
            if isinstance(exc, OSError):
                (self._meta / f"{name}.json").unlink(missing_ok=True)
                raise KafkaStorageError(f"Topic '{name}' not created: {_reason(exc)}") from None
            raise
        finally:
            del self._changing[name]
        self.topics[name] = topic
        return topic

    def delete_topic(self, name: str) -> None:
        topic = self.topics.pop(name, None)
        if topic is None:
            raise UnknownTopicOrPartition(f"Topic '{name}' does not exist.")
        meta = self._meta / f"{name}.json"
        meta.unlink(missing_ok=True)
        fsync_dir(self._meta)
        for log in topic.local_logs():
            log.delete()

    def create_partitions(self, name: str, total: int, *, validate_only: bool = False) -> Topic:
        return run_steps(self.create_partitions_steps(name, total, validate_only=validate_only))

    def create_partitions_steps(
        self, name: str, total: int, *, validate_only: bool = False
    ) -> Generator[None, None, Topic]:
        """``create_partitions`` one partition per step (see ``create_topic_steps``); the
        new partitions join the topic together after the last step."""
        topic = self.topics.get(name)
        if topic is None:
            raise UnknownTopicOrPartition(f"Topic '{name}' does not exist.")
        if name in self._changing:
            raise InvalidPartitions(f"Topic '{name}' is already being given new partitions.")
        current = len(topic.partitions)
        if total <= current:
            raise InvalidPartitions(
                f"Topic currently has {current} partitions, {total} would not be an increase."
            )
        self._check_partition_limit(name, total - current)
        if validate_only:
            return topic
        self._changing[name] = total - current
        new: list[PartitionLog] = []
        try:
            for p in range(current, total):
                new.append(self._new_partition(name, p, topic.log_config))
                yield
            if self.topics.get(name) is not topic:
                raise UnknownTopicOrPartition(f"Topic '{name}' was deleted meanwhile.")
            topic.partitions.extend(new)
            try:
                self._write_meta(topic)
            except BaseException:
                del topic.partitions[current:]
                raise
        except BaseException as exc:
            for log in new:
                log.delete()
            if isinstance(exc, OSError):
                raise KafkaStorageError(
                    f"Partitions of '{name}' not created: {_reason(exc)}"
                ) from None
            raise
        finally:
            del self._changing[name]
        return topic

    def alter_topic_configs(
        self,
        name: str,
        set: Mapping[str, str] | None = None,  # noqa: A002 - the interface's name
        delete: Iterable[str] = (),
        *,
        replace: bool = False,
        validate_only: bool = False,
    ) -> Topic:
        """Incremental (set / delete) or, with ``replace``, the legacy AlterConfigs form
        where ``set`` becomes the whole override map."""
        topic = self.topics.get(name)
        if topic is None:
            raise UnknownTopicOrPartition(f"Topic '{name}' does not exist.")
        new = {} if replace else dict(topic.configs)
        new.update(set or {})
        for key in delete:
            new.pop(key, None)
        validate_topic_configs(new)
        log_config = LogConfig.from_configs(self.broker_configs, new)
        if validate_only:
            return topic
        old_configs = topic.configs
        topic.configs = new
        try:
            self._write_meta(topic)
        except OSError as exc:
            topic.configs = old_configs
            raise KafkaStorageError(
                f"Configs of '{name}' not changed: {_reason(exc)}"
            ) from None
        topic.log_config = log_config
        for log in topic.local_logs():
            log.update_config(log_config)
        return topic

    def update_broker_configs(self, configs: Mapping[str, str]) -> None:
        """New broker settings (the whole map: static and dynamic) apply to every topic
        that does not override them."""
        self.broker_configs = dict(configs)
        for topic in self.topics.values():
            topic.log_config = LogConfig.from_configs(self.broker_configs, topic.configs)
            for log in topic.local_logs():
                log.update_config(topic.log_config)

    # -- cluster mode: the partitions the cluster assigns to this broker --------------------------
    def ensure_replicas_steps(
        self,
        name: str,
        topic_id: uuid.UUID,
        total: int,
        partitions: Iterable[int],
        configs: Mapping[str, str],
    ) -> Generator[None, None, Topic]:
        """Store ``partitions`` of a cluster topic of ``total`` partitions here, one partition
        per step (see ``create_topic_steps``). The new logs join the topic together, after
        its .meta file names them, so a crash never leaves a served partition that the next
        start would take for an orphan. A local topic of the same name with another id is
        an earlier topic, deleted while this broker was away: it goes first."""
        topic = self.topics.get(name)
        if topic is not None and topic.topic_id != topic_id:
            self.delete_topic(name)
            topic = None
        if topic is None:
            validate_topic_name(name)
            configs = dict(configs)
            log_config = LogConfig.from_configs(self.broker_configs, configs)
            topic = Topic(name, topic_id, configs, log_config, sparse=True)
            self._meta.mkdir(parents=True, exist_ok=True)
        if len(topic.partitions) < total:
            topic.partitions.extend([None] * (total - len(topic.partitions)))
        missing = [p for p in partitions if topic.log(p) is None]
        if not missing:
            return topic
        new: dict[int, PartitionLog] = {}
        try:
            for p in missing:
                new[p] = self._new_partition(name, p, topic.log_config)
                yield
            if self.topics.get(name) not in (None, topic):
                raise UnknownTopicOrPartition(f"Topic '{name}' changed meanwhile.")
            for p, log in new.items():
                topic.partitions[p] = log
            try:
                self._write_meta(topic)
            except BaseException:
                for p in new:
                    topic.partitions[p] = None
                raise
        except BaseException as exc:
            for log in new.values():
                log.delete()
            if isinstance(exc, OSError):
                raise KafkaStorageError(
                    f"Partitions of '{name}' not stored here: {_reason(exc)}"
                ) from None
            raise
        self.topics[name] = topic
        return topic

    def remove_replicas(self, name: str, partitions: Iterable[int]) -> list[int]:
        """Delete this broker's copies of ``partitions`` of a cluster topic (moved to
        other brokers). The .meta file stops naming them first, so a crash midway leaves
        orphan directories, removed at the next start, never a half-deleted partition
        that is served. The partitions removed."""
        topic = self.topics.get(name)
        if topic is None or not topic.sparse:
            return []
        logs = {p: log for p in partitions if (log := topic.log(p)) is not None}
        if not logs:
            return []
        for p in logs:
            topic.partitions[p] = None
        try:
            self._write_meta(topic)
        except BaseException:
            for p, log in logs.items():
                topic.partitions[p] = log
            raise
        for log in logs.values():
            log.delete()
        return sorted(logs)

    def _write_meta(self, topic: Topic) -> None:
        meta = {
            "name": topic.name,
            "topic_id": str(topic.topic_id),
            "partitions": len(topic.partitions),
            "configs": topic.configs,
        }
        if topic.sparse:
            meta["local"] = [p for p, log in enumerate(topic.partitions) if log is not None]
        path = self._meta / f"{topic.name}.json"
        tmp = path.with_name(path.name + ".tmp")
        try:
            with open(tmp, "w") as f:
                json.dump(meta, f, sort_keys=True)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except OSError:
            tmp.unlink(missing_ok=True)
            raise
        fsync_dir(self._meta)
