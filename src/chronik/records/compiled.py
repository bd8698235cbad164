"""Which of a module compiled with mypyc when the package is built (setup.py: stamping and
heads) and its source runs.

setup.py writes next to each source it compiles the digest of that source
(``<module>.py.sha256``: the hex SHA-256 and a newline). A compiled module whose source
no longer has that digest (a checkout edited and not rebuilt) would run old code: its
source runs instead, interpreted, with a warning. A module installed without its source
or digest is what was built and runs as it is.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
from pathlib import Path
from types import ModuleType

log = logging.getLogger("chronik.records")


def is_compiled(module: ModuleType) -> bool:
    return not (module.__file__ or "").endswith(".py")


def source_of(module: ModuleType) -> ModuleType:
    """The module's source, loaded and run interpreted whether or not it is compiled."""
    short = module.__name__.rsplit(".", 1)[-1]
    source = Path(module.__file__ or "").with_name(f"{short}.py")
    name = f"{module.__package__}._{short}_source"
    spec = importlib.util.spec_from_file_location(name, source)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {source}")
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return loaded


def current(module: ModuleType) -> ModuleType:
    """The compiled module, unless it was built from another version of its source:
    then the source, with a warning."""
    if not is_compiled(module):
        return module
    short = module.__name__.rsplit(".", 1)[-1]
    source = Path(module.__file__ or "").with_name(f"{short}.py")
    try:
        built = source.with_name(source.name + ".sha256").read_text().strip()
        now = hashlib.sha256(source.read_bytes()).hexdigest()
    except OSError:
        return module  # installed without its source or digest: it is what was built
    if built == now:
        return module
    log.warning(
        "%s was compiled from an older version of %s: running the source instead (slower;"
        " `make deps` or `pip install -e .` compiles it again)",
        module.__name__,
        source,
    )
    return source_of(module)
