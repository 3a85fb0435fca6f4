"""Each error class is defined once: no two exception classes in jsraft's production code share a name.

Method: import every production module under `jsraft` (not `jsraft.testing`, not `__main__`), collect
every exception class defined in a jsraft module, and group them by class name. `$rpc` rebuilds a relayed
error by class name (`server.rpc.error_from_body`), so two classes with one name would let a handler catch
one twin locally and miss the other when the request was forwarded. A second test plants a twin and sees
the first test's collector find it (the check has teeth).
"""

from __future__ import annotations

import gc
import importlib
import pkgutil
from collections import defaultdict

import jsraft
from jsraft.errors import JsraftError


def _production_modules() -> list[str]:
    names = []
    for info in pkgutil.walk_packages(jsraft.__path__, "jsraft."):
        parts = info.name.split(".")
        if parts[1] == "testing" or parts[-1] == "__main__":
            continue
        names.append(info.name)
    return sorted(names)


def _import_all() -> None:
    for name in _production_modules():
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as error:  # an optional extra (pyspark) that is not installed
            if (error.name or "").startswith("jsraft"):
                raise


def _exception_classes(root: type[BaseException] = BaseException) -> list[type[BaseException]]:
    found, pending, seen = [], [root], set()
    while pending:
        cls = pending.pop()
        for sub in cls.__subclasses__():
            if sub not in seen:
                seen.add(sub)
                pending.append(sub)
                module = sub.__module__
                if module.startswith("jsraft.") and not module.startswith("jsraft.testing"):
                    found.append(sub)
    return found


def _twins(classes: list[type[BaseException]]) -> dict[str, list[str]]:
    by_name: dict[str, list[str]] = defaultdict(list)
    for cls in classes:
        by_name[cls.__name__].append(f"{cls.__module__}.{cls.__qualname__}")
    return {name: sorted(where) for name, where in by_name.items() if len(where) > 1}


def test_error_class_names_are_unique_across_the_package() -> None:
    _import_all()
    classes = _exception_classes()
    assert any(cls.__name__ == "ConsumerNotFound" for cls in classes)  # the collector sees the package
    assert _twins(classes) == {}


def test_the_uniqueness_check_finds_a_planted_twin() -> None:
    _import_all()
    twin = type("ConsumerNotFound", (JsraftError,), {"__module__": "jsraft.server.planted"})
    try:
        assert "ConsumerNotFound" in _twins(_exception_classes())
    finally:
        del twin
        gc.collect()  # a class is in a reference cycle (its __mro__): only the collector drops it
    assert "ConsumerNotFound" not in _twins(_exception_classes())
