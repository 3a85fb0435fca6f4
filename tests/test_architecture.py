"""The layer rules of DESIGN.md §1, enforced by reading every module's imports with `ast`.

Method: parse each file under src/jsraft (no import, so a broken module still gets checked), collect
what it imports, and compare with the table below. Also: deterministic cores import no trio, socket,
time or threading and call no module-level `random` function; the durable layers (`store`, `wal`) do
no file I/O except through `Disk`; production code never imports `jsraft.testing`; modules and
functions stay under size ceilings, with an allowlist that may only shrink (an entry that is no longer
needed, or a file that grew past its entry, fails the test).
"""

from __future__ import annotations

import ast
import pathlib

import pytest

SRC = pathlib.Path(__file__).resolve().parent.parent / "src" / "jsraft"

# package -> (layer, jsraft packages it may import besides lower layers' packages, third-party allowed)
LAYERS: dict[str, int] = {
    "errors": 0, "limits": 0,
    "codec": 1, "raft": 1, "subjects": 1, "disk": 1, "jsapi": 1,
    "wal": 2, "store": 2,
    "stream": 3, "consumer": 3, "meta": 3,
    "runtime": 4, "transport": 4, "protocol": 4, "client": 4,
    "server": 5,
    "cli": 6, "spark": 6,
}
# Explicit exceptions to "siblings in one layer do not import each other" (DESIGN §1). `jsapi` holds
# JetStream API values (configs and their JSON shapes) and structures them with `codec`'s strict
# converter and `subjects`' validation: it is the one L1 package built on two L1 siblings.
SIBLING_ALLOWED = {("client", "protocol"), ("jsapi", "codec"), ("jsapi", "subjects")}
# What each L4 package may use below it (DESIGN §1 narrows some of them).
NARROWED = {"transport": 1, "protocol": 1, "client": 1}
THIRD_PARTY = {
    0: set(),
    1: {"attrs", "cattrs", "crc32c", "zstandard"},
    2: {"attrs", "cattrs", "crc32c", "zstandard"},
    3: {"attrs", "cattrs", "crc32c", "zstandard"},
    4: {"attrs", "cattrs", "crc32c", "zstandard", "trio"},
    5: {"attrs", "cattrs", "crc32c", "zstandard", "trio", "prometheus_client", "rich"},
    6: {"attrs", "cattrs", "crc32c", "zstandard", "trio", "prometheus_client", "rich", "pyspark", "click"},
}
DETERMINISTIC = {"raft", "wal", "store", "stream", "consumer", "meta", "protocol"}
FORBIDDEN_IN_DETERMINISTIC = {"trio", "socket", "time", "threading", "asyncio", "selectors"}
NO_DIRECT_IO = {"store", "wal"}
FORBIDDEN_IO_MODULES = {"os", "io", "pathlib", "shutil", "tempfile", "mmap"}

MODULE_LINES_MAX = 400
FUNCTION_LINES_MAX = 60
# path relative to src/jsraft -> lines it may have. May only shrink: remove an entry once it fits.
MODULE_ALLOWLIST: dict[str, int] = {}
# "path:function" -> lines it may have.
FUNCTION_ALLOWLIST: dict[str, int] = {}


def _modules() -> list[pathlib.Path]:
    return sorted(p for p in SRC.rglob("*.py"))


def _package(path: pathlib.Path) -> str:
    rel = path.relative_to(SRC)
    return rel.parts[0].removesuffix(".py") if rel.parts else ""


def _imports(tree: ast.AST, path: pathlib.Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative import: resolve against the module's package
                base = ".".join(("jsraft",) + path.relative_to(SRC).parts[:-1][: max(0, len(path.relative_to(SRC).parts) - node.level)])
                found.add(f"{base}.{node.module}" if node.module else base)
            elif node.module:
                found.add(node.module)
    return found


def _stdlib(name: str) -> bool:
    import sys

    return name.split(".")[0] in sys.stdlib_module_names or name == "__future__"


def _check_import(package: str, name: str) -> str | None:
    """A violation message, or None if `package` may import `name`."""
    layer = LAYERS.get(package)
    top = name.split(".")[0]
    if top == "jsraft":
        target = name.split(".")[1] if "." in name else ""
        if not target or target == package:
            return None
        if target == "testing":
            return f"{package} imports jsraft.testing (test kit is never imported by production code)"
        if package == "testing":
            return None
        target_layer = LAYERS.get(target)
        if target_layer is None:
            return f"{package} imports jsraft.{target}, which is not in the layer table"
        if layer is None:
            return f"{package} is not in the layer table"
        ceiling = NARROWED.get(package, layer - 1)
        if target_layer <= ceiling:
            return None
        if (package, target) in SIBLING_ALLOWED:
            return None
        return f"{package} (L{layer}) imports {target} (L{target_layer})"
    if _stdlib(name) or package == "testing" or layer is None:
        return None
    if top not in THIRD_PARTY[layer]:
        return f"{package} (L{layer}) imports third-party {top}"
    return None


def test_every_package_is_in_the_layer_table():
    packages = {_package(p) for p in _modules()} - {"__init__", "__main__", "testing"}
    assert packages <= set(LAYERS), f"add these to LAYERS (and DESIGN §1): {packages - set(LAYERS)}"


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(SRC)))
def test_layer_rules(path):
    package = _package(path)
    if package in ("__init__", "__main__"):
        return
    tree = ast.parse(path.read_text(), str(path))
    problems = [msg for name in sorted(_imports(tree, path)) if (msg := _check_import(package, name))]
    if package in DETERMINISTIC:
        problems += [f"{package} imports {n}" for n in _imports(tree, path)
                     if n.split(".")[0] in FORBIDDEN_IN_DETERMINISTIC]
        problems += _module_random_calls(tree)
    if package in NO_DIRECT_IO:
        problems += [f"{package} imports {n}: file I/O goes through Disk" for n in _imports(tree, path)
                     if n.split(".")[0] in FORBIDDEN_IO_MODULES]
        problems += [f"{package} calls open() at line {n.lineno}: file I/O goes through Disk"
                     for n in ast.walk(tree)
                     if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "open"]
    assert not problems, "\n".join(problems)


def _module_random_calls(tree: ast.AST) -> list[str]:
    """`random.choice(...)` and friends use the global RNG; only `random.Random` (injected) is allowed."""
    return [
        f"module-level random.{node.attr} at line {node.lineno}: inject a random.Random instead"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
        and node.value.id == "random" and node.attr != "Random"
    ]


def _function_sizes(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node.name, node.end_lineno - node.lineno + 1


def test_module_and_function_sizes():
    problems = []
    for path in _modules():
        rel = str(path.relative_to(SRC))
        text = path.read_text()
        lines = text.count("\n") + 1
        allowed = MODULE_ALLOWLIST.get(rel, MODULE_LINES_MAX)
        if lines > allowed:
            problems.append(f"{rel}: {lines} lines > {allowed}")
        if rel in MODULE_ALLOWLIST and lines <= MODULE_LINES_MAX:
            problems.append(f"{rel}: fits now; remove it from MODULE_ALLOWLIST")
        for name, size in _function_sizes(ast.parse(text)):
            key = f"{rel}:{name}"
            allowed = FUNCTION_ALLOWLIST.get(key, FUNCTION_LINES_MAX)
            if size > allowed:
                problems.append(f"{key}: {size} lines > {allowed}")
    stale = [k for k in FUNCTION_ALLOWLIST if not (SRC / k.split(":")[0]).exists()]
    problems += [f"{k}: file gone; remove it from FUNCTION_ALLOWLIST" for k in stale]
    assert not problems, "\n".join(problems)


def test_checker_has_teeth():
    """The rules above must reject what they claim to reject."""
    assert _check_import("store", "jsraft.stream") is not None  # upward
    assert _check_import("store", "jsraft.wal") is not None  # sibling
    assert _check_import("raft", "trio") is not None  # third-party not allowed in L1
    assert _check_import("server", "jsraft.testing.sim") is not None
    assert _check_import("client", "jsraft.protocol") is None  # the one allowed sibling
    assert _check_import("transport", "jsraft.store") is not None  # narrowed L4
    tree = ast.parse("import random\nx = random.random()\nr = random.Random(1)\n")
    assert len(_module_random_calls(tree)) == 1
