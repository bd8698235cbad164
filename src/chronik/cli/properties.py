"""Kafka's `server.properties` files, read as java.util.Properties reads them.

Format: one `key=value` per logical line; the separator is the first unescaped
`=`, `:` or whitespace, with whitespace around it ignored. Lines whose first
non-blank character is `#` or `!` are comments. A line ending in an odd number
of backslashes continues on the next line, whose leading whitespace is dropped.
Backslash escapes: `\\t \\n \\r \\f`, `\\uXXXX`, and `\\` before any other
character stands for that character (so `\\=`, `\\:`, `\\ ` and `\\\\`). A later
key overrides an earlier one. Files are UTF-8 (Latin-1, Java's own default, is
accepted when a file is not valid UTF-8).
"""

from __future__ import annotations

import re
from pathlib import Path

BLANKS = " \t\f"
ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
# First unescaped separator: key characters are escapes or anything but separators.
KEY = re.compile(r"((?:\\.|[^\\=: \t\f])*)")


def load_properties(path: str | Path) -> dict[str, str]:
    raw = Path(path).read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("latin-1")
    return parse_properties(text)


def parse_properties(text: str) -> dict[str, str]:
    result: dict[str, str] = {}
    for line in logical_lines(text):
        match = KEY.match(line)
        assert match is not None  # the pattern matches the empty string
        key = match.group(1)
        rest = line[match.end() :].lstrip(BLANKS)
        if rest[:1] in ("=", ":"):
            rest = rest[1:].lstrip(BLANKS)
        result[unescape(key)] = unescape(rest)
    return result


def logical_lines(text: str) -> list[str]:
    lines: list[str] = []
    pending: str | None = None
    for natural in re.split(r"\r\n|\r|\n", text):
        if pending is None:
            stripped = natural.lstrip(BLANKS)
            if not stripped or stripped[0] in "#!":
                continue
        else:
            stripped = pending + natural.lstrip(BLANKS)
        trailing = len(stripped) - len(stripped.rstrip("\\"))
        if trailing % 2 == 1:
            pending = stripped[:-1]
            continue
        pending = None
        lines.append(stripped)
    if pending is not None:
        lines.append(pending)
    return lines


def unescape(text: str) -> str:
    if "\\" not in text:
        return text
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char != "\\" or i + 1 == len(text):
            out.append(char)
            i += 1
            continue
        code = text[i + 1]
        if code == "u":
            digits = text[i + 2 : i + 6]
            if len(digits) != 4 or not all(c in "0123456789abcdefABCDEF" for c in digits):
                raise ValueError(f"malformed \\uXXXX escape in {text!r}")
            out.append(chr(int(digits, 16)))
            i += 6
            continue
        out.append(ESCAPES.get(code, code))
        i += 2
    return "".join(out)
