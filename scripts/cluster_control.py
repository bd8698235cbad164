"""How `scripts/cluster.py start|stop|kill|restart|status` reaches the running `make cluster`.

The running script (the supervisor) owns every broker process, so that it notices each
exit and stops them all on Ctrl-C; another terminal asks it through files in the
cluster's directory (./chronik-cluster by default):

    cluster.pid               the supervisor's pid, as text, while it runs
    broker-N.pid              broker N's pid, as text, while it runs
    control/<id>.request      {"action": "kill", "broker": 2}: written by a command
    control/<id>.reply        {"ok": true, "message": "..."}: the supervisor's answer

<id> is the command's `<time in ns>-<pid>`, so requests sort in the order they were
made. Both sides write a file under a temporary name and rename it, so the other never
reads half of one. The supervisor removes a request when it takes it and the command
removes the reply once read; a command that gives up removes its request if it is still
there.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ACTIONS = ("start", "stop", "kill", "restart", "status")


@dataclass
class Request:
    id: str
    action: str
    broker: int | None


def control_dir(base: Path) -> Path:
    return base / "control"


def supervisor_pid_path(base: Path) -> Path:
    return base / "cluster.pid"


def write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def running_supervisor(base: Path) -> int | None:
    """The pid of the supervisor running from `base`, or None."""
    try:
        pid = int(supervisor_pid_path(base).read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if pid_alive(pid) else None


# The supervisor's side.


def take_requests(base: Path) -> Iterator[Request]:
    """The requests waiting, oldest first, each removed as it is taken."""
    folder = control_dir(base)
    try:
        names = sorted(p.name for p in folder.glob("*.request"))
    except OSError:
        return
    for name in names:
        path = folder / name
        try:
            text = path.read_text()
            path.unlink()
        except FileNotFoundError:
            continue  # withdrawn by a command that gave up
        request_id = name.removesuffix(".request")
        try:
            body = json.loads(text)
            action = body["action"]
            broker = body.get("broker")
            if action not in ACTIONS or not (broker is None or isinstance(broker, int)):
                raise ValueError(text)
        except (ValueError, KeyError, TypeError):
            reply(base, request_id, False, f"not a request: {text[:200]!r}")
            continue
        yield Request(request_id, action, broker)


def reply(base: Path, request_id: str, ok: bool, message: str) -> None:
    folder = control_dir(base)
    if folder.is_dir():
        write_atomically(folder / f"{request_id}.reply",
                         json.dumps({"ok": ok, "message": message}))


# The command's side.


class NotRunning(RuntimeError):
    pass


def ask(base: Path, action: str, broker: int | None, timeout: float) -> tuple[bool, str]:
    """Send one request to the supervisor running from `base` and wait for its reply."""
    pid = running_supervisor(base)
    folder = control_dir(base)
    if pid is None or not folder.is_dir():
        raise NotRunning(f"no `make cluster` is running from {base}")
    request_id = f"{time.time_ns()}-{os.getpid()}"
    request = folder / f"{request_id}.request"
    answer = folder / f"{request_id}.reply"
    write_atomically(request, json.dumps({"action": action, "broker": broker}))
    deadline = time.monotonic() + timeout
    while True:
        try:
            body = json.loads(answer.read_text())
        except FileNotFoundError:
            body = None
        if body is not None:
            answer.unlink(missing_ok=True)
            return bool(body["ok"]), str(body["message"])
        if not pid_alive(pid):
            request.unlink(missing_ok=True)
            raise NotRunning(f"the `make cluster` running from {base} stopped")
        if time.monotonic() > deadline:
            taken = not request.exists()
            request.unlink(missing_ok=True)
            return False, (f"no answer in {timeout:.0f} s"
                           + ("; the request is being carried out" if taken else ""))
        time.sleep(0.05)
