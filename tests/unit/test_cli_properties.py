"""Kafka server.properties parsing, checked against java.util.Properties' rules."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from chronik.cli.properties import load_properties, parse_properties


def test_kafka_sample_file(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text(
        "# Licensed to the Apache Software Foundation\n"
        "! another comment style\n"
        "\n"
        "process.roles=broker,controller\n"
        "node.id = 1\n"
        "num.partitions: 3\n"
        "log.dirs /tmp/kraft-combined-logs\n"
        "   log.retention.hours=168   \n"
        "listeners=PLAINTEXT://:9092,\\\n"
        "          CONTROLLER://:9093\n"
        "empty.value=\n"
    )
    assert load_properties(path) == {
        "process.roles": "broker,controller",
        "node.id": "1",
        "num.partitions": "3",
        "log.dirs": "/tmp/kraft-combined-logs",
        "log.retention.hours": "168   ",
        "listeners": "PLAINTEXT://:9092,CONTROLLER://:9093",
        "empty.value": "",
    }


def test_escapes_and_separators() -> None:
    text = "a\\=b=c\\:d\nkey\\ with\\ spaces = v\\tx\nuni=caf\\u00e9\nlast=wins\nlast=again\n"
    assert parse_properties(text) == {
        "a=b": "c:d",
        "key with spaces": "v\tx",
        "uni": "café",
        "last": "again",
    }


def test_even_backslashes_do_not_continue_and_comments_only_start_lines() -> None:
    text = "path=C:\\\\\nnext=1\nmulti=a\\\n  # not a comment\\\n  b\r\nx=y"
    assert parse_properties(text) == {
        "path": "C:\\",
        "next": "1",
        "multi": "a# not a commentb",
        "x": "y",
    }


def escape(text: str, is_key: bool) -> str:
    out = []
    for i, char in enumerate(text):
        if char == "\\":
            out.append("\\\\")
        elif char in "\t\n\r\f":
            out.append({"\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f"}[char])
        elif char in "=:#!" or (char == " " and (is_key or i == 0)):
            out.append("\\" + char)
        else:
            out.append(char)
    return "".join(out)


keys = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=20)
values = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)


@given(st.dictionaries(keys, values, max_size=8), st.sampled_from(["=", ":", " = ", " "]))
def test_written_properties_read_back(entries: dict[str, str], separator: str) -> None:
    text = "\n".join(f"{escape(k, True)}{separator}{escape(v, False)}" for k, v in entries.items())
    assert parse_properties(text) == entries
