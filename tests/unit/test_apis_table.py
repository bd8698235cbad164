"""The static table of request handlers: every module in broker/apis/ that names an API
key is in it under that key, and nothing else is."""

from __future__ import annotations

import importlib
import pkgutil

from chronik.broker import apis


def test_each_handler_module_is_in_the_table_under_its_own_key() -> None:
    modules = {
        info.name: importlib.import_module(f"chronik.broker.apis.{info.name}")
        for info in pkgutil.iter_modules(apis.__path__)
    }
    with_keys = {name: m for name, m in modules.items() if hasattr(m, "API_KEY")}
    assert {m.__name__ for m in apis.HANDLERS.values()} == {
        m.__name__ for m in with_keys.values()
    }
    for key, module in apis.HANDLERS.items():
        assert key == module.API_KEY, module.__name__
        low, high = module.VERSIONS
        assert 0 <= low <= high
        assert callable(module.handle)
