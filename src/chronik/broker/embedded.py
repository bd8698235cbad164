"""An in-process broker on its own thread, for tests and notebooks.

with EmbeddedBroker(data_dir="/tmp/events") as broker:
    producer = Producer({"bootstrap.servers": broker.bootstrap})
"""

from __future__ import annotations

import asyncio
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

from chronik.broker.server import Broker


class EmbeddedBroker:
    def __init__(
        self,
        data_dir: str | Path | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        config: Mapping[str, str] | None = None,
        metrics_listen: str | None = None,
    ) -> None:
        self.metrics_listen = metrics_listen
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if data_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="chronik-")
            data_dir = self._tmp.name
        self.data_dir = Path(data_dir)
        self.host = host
        self.port = port
        self.config = dict(config or {})
        self.broker: Broker | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> EmbeddedBroker:
        if self._thread is not None:
            return self
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            broker = Broker(
                self.data_dir, self.host, self.port, self.config, metrics_listen=self.metrics_listen
            )
            self.broker = broker
            try:
                loop.run_until_complete(broker.start())
            except BaseException as exc:
                failure.append(exc)
                ready.set()
                loop.close()
                return
            self.port = broker.port
            ready.set()
            loop.run_forever()
            loop.run_until_complete(broker.stop())
            loop.close()

        self._thread = threading.Thread(target=run, name="chronik-broker", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            self._thread = None
            raise failure[0]
        return self

    def stop(self) -> None:
        if self._thread is None or self._loop is None:
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._thread = None
        self._loop = None

    def restart(self) -> EmbeddedBroker:
        """Stop and start again on the same data dir and port."""
        self.stop()
        return self.start()

    def close(self) -> None:
        self.stop()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
