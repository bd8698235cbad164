# Builds chronik with its compiled modules, the per-record loops of the produce path:
# chronik.records.stamping (versioned produce) and chronik.records.heads (schema
# validation), compiled by mypyc (from mypy, a build requirement in pyproject.toml), each
# on its own (its shared library next to it). Everything else is plain Python. Where
# mypyc or a C compiler is missing, or CHRONIK_PURE_PYTHON is set, the package installs
# without them and the modules run interpreted (slower, same behaviour).
#
# Next to each source it writes <module>.py.sha256, the digest of the source compiled, so
# chronik.records.compiled can tell a compiled module older than its source (an edited
# checkout not yet rebuilt) and run the source instead.
from __future__ import annotations

import hashlib
import os
from pathlib import Path

from setuptools import setup

COMPILED = ["src/chronik/records/stamping.py", "src/chronik/records/heads.py"]


def ext_modules() -> list:
    if os.environ.get("CHRONIK_PURE_PYTHON"):
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        return []
    for path in COMPILED:
        source = Path(__file__).parent / path
        digest = hashlib.sha256(source.read_bytes()).hexdigest()
        source.with_name(source.name + ".sha256").write_text(digest + "\n")
    modules = mypycify(
        ["--ignore-missing-imports", "--follow-imports=silent", *COMPILED],
        opt_level="3",
        separate=True,
    )
    for module in modules:
        module.optional = True  # no compiler: install the interpreted module
    return modules


setup(ext_modules=ext_modules())
