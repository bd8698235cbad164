"""The console's page and its static files, served from the package's ``static/``
directory (package data): ``GET /console/`` is ``index.html``, ``GET
/console/static/<name>`` a file of that directory by its plain name (no directories, no
``..``: anything else is 404). Every console answer carries HEADERS: no caching without
revalidation, a Content-Security-Policy that lets the page load only its own scripts,
styles and images (and data: images), never be framed, and no content-type sniffing.
"""

from __future__ import annotations

import re
from importlib import resources

from chronik.http.server import HttpError, Response

HEADERS = {
    "Cache-Control": "no-cache",
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
        "frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
}
CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".json": "application/json",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
    ".woff2": "font/woff2",
    ".txt": "text/plain; charset=utf-8",
}
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
MAX_FILE_BYTES = 8 * 1024 * 1024


def static_file(name: str) -> Response:
    if not NAME.fullmatch(name) or ".." in name:
        raise HttpError(404, "not_found", "no such file")
    suffix = name[name.rfind(".") :] if "." in name else ""
    ctype = CONTENT_TYPES.get(suffix.lower())
    if ctype is None:
        raise HttpError(404, "not_found", "no such file")
    path = resources.files("chronik.http.console") / "static" / name
    try:
        if not path.is_file():
            raise HttpError(404, "not_found", "no such file")
        data = path.read_bytes()
    except OSError:
        raise HttpError(404, "not_found", "no such file") from None
    if len(data) > MAX_FILE_BYTES:
        raise HttpError(404, "not_found", "no such file")
    return 200, data, {"Content-Type": ctype}
