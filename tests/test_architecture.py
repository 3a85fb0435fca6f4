"""The layer rules of DESIGN.md §1, enforced by reading every module's imports with `ast`.

Method: parse each file under src/jsraft (no import, so a broken module still gets checked), collect
what it imports — `from jsraft import server` counts as importing `jsraft.server` — and compare with the
table below. Also: deterministic cores (`raft`, `wal`, `store`, `stream`, `consumer`, `meta`, `protocol`,
`replica`) import no trio, socket, time or threading and use no module-level `random` function (neither
`random.choice(...)` nor `from random import choice`); the layers that own no files (`store`, `wal`,
`raft`, `stream`, `consumer`, `meta`, `replica`) import no `os`, `io`, `pathlib`, ... and call no
`open()`: file I/O goes through `Disk`; production code never imports `jsraft.testing`; no two
production modules import each other in a cycle (a package's `__init__` importing its own modules is
a hand-off, not a cycle; imports under `if TYPE_CHECKING:` are annotations, not dependencies); modules
and functions stay under size ceilings, with an allowlist that may only shrink (an entry that is no
longer needed, or a file that grew past its entry, fails the test). Inside the server (issue #13) its
subpackages are ranked — `settings` < `nats` < `groups` < `api` < `ops` < the top modules (`node`) — and a
module imports at run time only its own subpackage, lower-ranked ones and `server.errors` (an allowlist
of exceptions that may only shrink); `api` reaches the NATS face only through its port
(`nats.client_server`); no subpackage imports another's private (`_x`) module or name; no subpackage
module names `Node` (not even in an annotation) or reaches through a stored one (`self.node.x`,
`self._node.x`): services get the narrow parts they use, wired once in `server/node.py` (an allowlist of
whole-node observers that may only shrink). Every rule has
teeth: a test plants each kind of violation in a temporary copy of the package and sees the check report
it.
"""

from __future__ import annotations

import ast
import pathlib
import shutil
import sys

import pytest

SRC = pathlib.Path(__file__).resolve().parent.parent / "src" / "jsraft"

# package -> (layer, jsraft packages it may import besides lower layers' packages, third-party allowed)
LAYERS: dict[str, float] = {
    "errors": 0, "limits": 0,
    "codec": 1, "raft": 1, "subjects": 1, "disk": 1, "jsapi": 1,
    "wal": 2, "store": 2,
    "stream": 3, "consumer": 3, "meta": 3,
    "replica": 3.5,
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
    3.5: {"attrs", "cattrs", "crc32c", "zstandard"},
    4: {"attrs", "cattrs", "crc32c", "zstandard", "trio"},
    5: {"attrs", "cattrs", "crc32c", "zstandard", "trio", "prometheus_client", "rich", "bcrypt", "cryptography"},
    6: {"attrs", "cattrs", "crc32c", "zstandard", "trio", "prometheus_client", "rich", "pyspark", "pyarrow", "bcrypt",
        "cryptography", "click"},
}
DETERMINISTIC = {"raft", "wal", "store", "stream", "consumer", "meta", "protocol", "replica"}
FORBIDDEN_IN_DETERMINISTIC = {"trio", "socket", "time", "threading", "asyncio", "selectors"}
NO_DIRECT_IO = {"store", "wal", "raft", "stream", "consumer", "meta", "replica"}
FORBIDDEN_IO_MODULES = {"os", "io", "pathlib", "shutil", "tempfile", "mmap"}

MODULE_LINES_MAX = 400
FUNCTION_LINES_MAX = 60
# path relative to src/jsraft -> lines it may have. May only shrink: remove an entry once it fits.
MODULE_ALLOWLIST: dict[str, int] = {}
# "path:function" -> lines it may have.
FUNCTION_ALLOWLIST: dict[str, int] = {}


def _modules(root: pathlib.Path = SRC) -> list[pathlib.Path]:
    return sorted(p for p in root.rglob("*.py"))


def _package(path: pathlib.Path, root: pathlib.Path = SRC) -> str:
    rel = path.relative_to(root)
    return rel.parts[0].removesuffix(".py") if rel.parts else ""


def _imports(tree: ast.AST, path: pathlib.Path, root: pathlib.Path = SRC) -> set[str]:
    """Every module name `tree` imports; for `from a import b`, both `a` and `a.b` (b may be a module)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = node.module
            if node.level:  # relative import: resolve against the module's package
                parts = path.relative_to(root).parts[:-1]
                base = ".".join(("jsraft",) + parts[: max(0, len(parts) + 1 - node.level)])
                module = f"{base}.{module}" if module else base
            if module:
                found.add(module)
                found.update(f"{module}.{alias.name}" for alias in node.names if alias.name != "*")
    return found


# The packages and modules directly under src/jsraft: `jsraft.<one of these>` is a module, any other
# `jsraft.<name>` is an attribute of `jsraft/__init__.py`.
_TOP_LEVEL = {p.name.removesuffix(".py") for p in SRC.iterdir() if p.suffix == ".py" or p.is_dir()} - {"__pycache__"}


def _stdlib(name: str) -> bool:
    import sys

    return name.split(".")[0] in sys.stdlib_module_names or name == "__future__"


def _check_import(package: str, name: str) -> str | None:
    """A violation message, or None if `package` may import `name`."""
    layer = LAYERS.get(package)
    top = name.split(".")[0]
    if top == "jsraft":
        target = name.split(".")[1] if "." in name else ""
        if not target or target == package or target not in _TOP_LEVEL:
            return None  # `jsraft` itself, or a name its `__init__` defines (`from jsraft import __version__`)
        if target == "testing":
            return f"{package} imports jsraft.testing (test kit is never imported by production code)"
        if package == "testing":
            return None
        target_layer = LAYERS.get(target)
        if target_layer is None:
            return f"{package} imports jsraft.{target}, which is not in the layer table"
        if layer is None:
            return f"{package} is not in the layer table"
        below = target_layer <= NARROWED[package] if package in NARROWED else target_layer < layer
        if below:
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
    problems = _module_problems(path)
    assert not problems, "\n".join(problems)


def _module_problems(path: pathlib.Path, root: pathlib.Path = SRC) -> list[str]:
    package = _package(path, root)
    if package in ("__init__", "__main__"):
        return []
    tree = ast.parse(path.read_text(), str(path))
    imports = _imports(tree, path, root)
    problems = [msg for name in sorted(imports) if (msg := _check_import(package, name))]
    if package in DETERMINISTIC:
        problems += [f"{package} imports {n}" for n in sorted(imports)
                     if n.split(".")[0] in FORBIDDEN_IN_DETERMINISTIC]
        problems += _module_random_calls(tree)
    if package == "server":
        problems += _server_problems(path, tree, imports, root)
    if package in NO_DIRECT_IO:
        problems += [f"{package} imports {n}: file I/O goes through Disk" for n in sorted(imports)
                     if n.split(".")[0] in FORBIDDEN_IO_MODULES]
        problems += [f"{package} calls open() at line {n.lineno}: file I/O goes through Disk"
                     for n in ast.walk(tree)
                     if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "open"]
    return problems


def _module_random_calls(tree: ast.AST) -> list[str]:
    """`random.choice(...)` and friends use the global RNG; only `random.Random` (injected) is allowed —
    whether reached as `random.x`, through `import random as r`, or as `from random import x`."""
    aliases = {"random"}
    problems = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            aliases.update(a.asname for a in node.names if a.name == "random" and a.asname)
        elif isinstance(node, ast.ImportFrom) and node.module == "random" and not node.level:
            problems += [f"from random import {a.name} at line {node.lineno}: inject a random.Random instead"
                         for a in node.names if a.name != "Random"]
    problems += [
        f"module-level random.{node.attr} at line {node.lineno}: inject a random.Random instead"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
        and node.value.id in aliases and node.attr != "Random"
    ]
    return problems


# --- The server's subpackages (issue #13) -------------------------------------------------------------

# A server module imports at run time its own subpackage, lower-ranked ones and `server.errors`; the top
# modules (`node`, `thread_node`, the package `__init__`) build the node from all of them and are reached
# from a subpackage only under `if TYPE_CHECKING:` (annotations).
SERVER_RANKS = {"settings": 0, "nats": 1, "groups": 2, "api": 3, "ops": 4}
# (module path relative to src/jsraft, imported module) allowed against the ranks. May only shrink.
SERVER_RANK_EXCEPTIONS: set[tuple[str, str]] = set()
# The NATS face's port: the one `nats` module `api` may import (the rest are its internals).
NATS_PORT = {"client_server"}


def _server_target(name: str) -> tuple[str, str] | None:
    """(subpackage or top module, module) of a `jsraft.server...` import, or None."""
    parts = name.split(".")
    if parts[:2] != ["jsraft", "server"]:
        return None
    if len(parts) == 2:
        return ("__init__", "__init__")
    if parts[2] in SERVER_RANKS:
        return (parts[2], parts[3] if len(parts) > 3 else "__init__")
    return (parts[2], parts[2])


# No module of a subpackage takes the whole `Node` (#13: services receive the narrow parts they use, wired
# once in `server/node.py`: `ApiParts`, `MonitorParts`, `LocalStreams`, callables). No exceptions.
NODE_ATTRIBUTES = {"node", "_node"}


def _node_uses(tree: ast.Module, imports: set[str]) -> list[str]:
    """Where a module names `Node` or reaches through a stored node (`<x>.node.<attr>`)."""
    found = [f"imports {name}" for name in sorted(imports) if name == "jsraft.server.node"]
    for n in ast.walk(tree):
        if isinstance(n, ast.ImportFrom) and n.module == "jsraft.server" and any(a.name == "Node" for a in n.names):
            found.append(f"imports Node from jsraft.server at line {n.lineno}")
        elif isinstance(n, ast.Name) and n.id == "Node":
            found.append(f"names Node at line {n.lineno}")
        elif isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.strip() == "Node":
            found.append(f"annotates with 'Node' at line {n.lineno}")
        elif isinstance(n, ast.Attribute) and isinstance(n.value, ast.Attribute) and n.value.attr in NODE_ATTRIBUTES:
            found.append(f"reaches through a stored node (.{n.value.attr}.{n.attr}) at line {n.lineno}")
    return found


def _server_problems(path: pathlib.Path, tree: ast.Module, imports: set[str], root: pathlib.Path) -> list[str]:
    rel = path.relative_to(root)
    if len(rel.parts) < 3 or rel.parts[1] not in SERVER_RANKS:
        return []  # a top module of the server
    own = rel.parts[1]
    runtime = _runtime_imports(tree, path, root)
    problems = []
    problems += [f"server.{own}: {rel.name} {use}: take the narrow parts instead of Node (wired in node.py)"
                 for use in _node_uses(tree, imports)]
    for name in sorted(imports):
        target = _server_target(name)
        if target is None or target[0] == own:
            continue
        sub, module = target
        tail = name.split(".")[3 if sub in SERVER_RANKS else 2:]
        if any(part.startswith("_") and not part.startswith("__") for part in tail):
            problems.append(f"server.{own} imports {name}: a private name of another subpackage")
        if own == "api" and sub == "nats" and module not in NATS_PORT:
            problems.append(f"server.api imports {name}: the NATS face's internals (only {sorted(NATS_PORT)})")
        if name not in runtime or sub == "errors":
            continue
        if sub not in SERVER_RANKS:
            problems.append(f"server.{own} imports {name} at run time: the top of the server (annotations only)")
        elif SERVER_RANKS[sub] > SERVER_RANKS[own] and (str(rel), ".".join(name.split(".")[:4])) \
                not in SERVER_RANK_EXCEPTIONS:
            problems.append(f"server.{own} imports {name}: server.{sub} ranks above it")
    return problems


def test_server_rank_exceptions_are_all_needed():
    for rel, target in sorted(SERVER_RANK_EXCEPTIONS):
        path = SRC / rel
        assert path.exists(), f"{rel}: file gone; remove it from SERVER_RANK_EXCEPTIONS"
        tree = ast.parse(path.read_text())
        assert any(n == target or n.startswith(target + ".") for n in _runtime_imports(tree, path, SRC)), \
            f"{rel} no longer imports {target}: remove it from SERVER_RANK_EXCEPTIONS"


# --- Import cycles ------------------------------------------------------------------------------------

def _module_name(path: pathlib.Path, root: pathlib.Path) -> str:
    parts = ("jsraft",) + path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_imports(tree: ast.Module, path: pathlib.Path, root: pathlib.Path) -> set[str]:
    """What the module imports when it runs: module level and inside functions, not `if TYPE_CHECKING:`."""
    def type_only(node: ast.If) -> bool:
        test = node.test
        return getattr(test, "id", None) == "TYPE_CHECKING" or getattr(test, "attr", None) == "TYPE_CHECKING"

    kept = ast.Module(body=[], type_ignores=[])
    pending: list[ast.AST] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.If) and type_only(node):
            pending.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            kept.body.append(node)  # type: ignore[arg-type]
            continue
        pending.extend(ast.iter_child_nodes(node))
    return _imports(kept, path, root)


def _import_graph(root: pathlib.Path) -> dict[str, set[str]]:
    files = {_module_name(p, root): p for p in _modules(root)}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        targets = set()
        for imported in _runtime_imports(ast.parse(path.read_text(), str(path)), path, root):
            while imported and imported not in files:
                imported = imported.rpartition(".")[0]  # `a.b.Name` is module `a.b`
            if imported and imported != name:
                targets.add(imported)
        if path.name == "__init__.py":  # a package handing off to its own modules is not a cycle
            targets = {t for t in targets if not t.startswith(name + ".")}
        graph[name] = targets
    return graph


def import_cycles(root: pathlib.Path = SRC, skip: tuple[str, ...] = ()) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan), outside the packages in `skip`."""
    graph = {n: {t for t in ts if not t.startswith(skip)} for n, ts in _import_graph(root).items()
             if not n.startswith(skip)}
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        order[node] = low[node] = len(order)
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if target not in order:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], order[target])
        if low[node] == order[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                cycles.append(sorted(group))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(graph) + 100))
    try:
        for node in sorted(graph):
            if node not in order:
                visit(node)
    finally:
        sys.setrecursionlimit(limit)
    return cycles


def test_no_import_cycles():
    """Every module under src/jsraft, the test kit (`jsraft.testing`) included: a function-level import
    closes a cycle as surely as a module-level one (issue #13)."""
    cycles = import_cycles()
    assert not cycles, "\n".join(" <-> ".join(c) for c in cycles)


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
    assert _check_import("runtime", "jsraft.replica") is None  # L4 on L3½
    assert _check_import("replica", "jsraft.stream") is None  # L3½ on L3
    assert _check_import("replica", "jsraft.runtime") is not None
    assert _check_import("replica", "trio") is not None
    tree = ast.parse("import random\nx = random.random()\nr = random.Random(1)\n")
    assert len(_module_random_calls(tree)) == 1


# Each planted file, and a fragment of the problem the checks must report for it.
PLANTED = {
    "stream/planted_layer.py": ("from jsraft import server\n", "stream (L3) imports server"),
    "raft/planted_testing.py": ("from jsraft import testing\n", "imports jsraft.testing"),
    "meta/planted_random.py": ("from random import choice\n", "from random import choice"),
    "store/planted_random_alias.py": ("import random as rnd\nx = rnd.random()\n", "module-level random.random"),
    "consumer/planted_os.py": ("import os\n", "consumer imports os: file I/O goes through Disk"),
    "raft/planted_open.py": ("def f():\n    return open('x')\n", "raft calls open()"),
    "replica/planted_trio.py": ("import trio\n", "replica imports trio"),
    "replica/planted_runtime.py": ("from jsraft.runtime import NodeRuntime\n", "replica (L3.5) imports runtime"),
    "replica/planted_server.py": ("from jsraft import server\n", "replica (L3.5) imports server"),
    "server/api/planted_nats.py": ("from jsraft.server.nats import client_conn\n", "the NATS face's internals"),
    "server/nats/planted_rank.py": ("from jsraft.server.groups.streams import StreamManager\n",
                                    "server.groups ranks above it"),
    "server/settings/planted_node.py": ("from jsraft.server.node import Node\n", "the top of the server"),
    "server/api/planted_node_annotation.py": (
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from jsraft.server.node import Node\n"
        "def f(node: 'Node') -> None: ...\n", "take the narrow parts instead of Node"),
    "server/groups/planted_stored_node.py": (
        "class S:\n    def __init__(self, node):\n        self._node = node\n"
        "    def f(self):\n        return self._node.call_stream('s', 'm', {})\n", "reaches through a stored node"),
    "server/ops/planted_view_node.py": (  # the monitoring views once took the Node: no exception is left
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from jsraft.server.node import Node\n"
        "def varz(node: 'Node') -> dict: ...\n", "take the narrow parts instead of Node"),
    "server/ops/planted_collector.py": (
        "class C:\n    def __init__(self, node):\n        self.node = node\n"
        "    def collect(self):\n        return self.node.streams.replicas\n", "reaches through a stored node"),
    "server/groups/planted_private.py": ("from jsraft.server.nats._secret import key\n",
                                         "a private name of another subpackage"),
}


def _planted_copy(tmp_path: pathlib.Path) -> pathlib.Path:
    root = tmp_path / "jsraft"
    shutil.copytree(SRC, root, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def test_each_planted_violation_fails_the_check(tmp_path):
    root = _planted_copy(tmp_path)
    assert not any(_module_problems(p, root) for p in _modules(root))  # the clean copy passes
    for rel, (text, expected) in PLANTED.items():
        (root / rel).write_text(text)
    for rel, (_, expected) in PLANTED.items():
        problems = _module_problems(root / rel, root)
        assert any(expected in problem for problem in problems), f"{rel}: {expected!r} not in {problems}"


def test_a_planted_import_cycle_fails_the_check(tmp_path):
    root = _planted_copy(tmp_path)
    assert import_cycles(root) == []
    (root / "stream" / "planted_a.py").write_text("from jsraft.stream import planted_b\n")
    (root / "stream" / "planted_b.py").write_text("def f():\n    from jsraft.stream.planted_a import g\n")
    # Annotations only (TYPE_CHECKING), and names reached through a package's `__init__` (which imports
    # its own modules: a hand-off): neither is a cycle.
    (root / "wal" / "planted_c.py").write_text(
        "from typing import TYPE_CHECKING\nimport jsraft.wal\nif TYPE_CHECKING:\n    from jsraft.wal import planted_d\n")
    (root / "wal" / "planted_d.py").write_text("from jsraft.wal import planted_c\n")
    # The test kit is checked too: a factory importing its backends inside a function, which import it.
    (root / "testing" / "planted_e.py").write_text("def make():\n    from jsraft.testing.planted_f import F\n")
    (root / "testing" / "planted_f.py").write_text("from jsraft.testing.planted_e import make\n")
    assert import_cycles(root) == [["jsraft.stream.planted_a", "jsraft.stream.planted_b"],
                                   ["jsraft.testing.planted_e", "jsraft.testing.planted_f"]]


# --- "Modules:" lines in package docstrings -----------------------------------------------------------

# Packages whose `__init__` docstring does not list its modules yet. May only shrink.
MODULES_LINE_EXEMPT: set[str] = set()


def _unlisted_modules(package_dir: pathlib.Path) -> list[str] | None:
    """The package's modules its `__init__` docstring's "Modules:" paragraph does not name (None: there is
    no such paragraph)."""
    init = package_dir / "__init__.py"
    doc = ast.get_docstring(ast.parse(init.read_text())) or ""
    start = doc.find("Modules")
    if start < 0:
        return None
    paragraph = doc[start:].split("\n\n")[0]
    modules = sorted(p.stem for p in package_dir.glob("*.py") if p.stem not in ("__init__", "__main__"))
    modules += sorted(p.name for p in package_dir.iterdir() if (p / "__init__.py").exists())
    return [m for m in modules if f"`{m}`" not in paragraph]


@pytest.mark.parametrize("package_dir", sorted(p.parent for p in SRC.rglob("__init__.py") if p.parent != SRC),
                         ids=lambda p: str(p.relative_to(SRC)))
def test_modules_lines_name_every_module(package_dir):
    rel = str(package_dir.relative_to(SRC))
    unlisted = _unlisted_modules(package_dir)
    if rel in MODULES_LINE_EXEMPT:
        assert unlisted, f"{rel} lists its modules now: remove it from MODULES_LINE_EXEMPT"
        return
    assert not unlisted, f"{rel}/__init__.py: its Modules paragraph does not name {unlisted}"


def test_the_modules_line_check_has_teeth(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text('"""A package.\n\nModules: `a` (the first).\n"""\n')
    (package / "a.py").write_text("")
    assert _unlisted_modules(package) == []
    (package / "b.py").write_text("")
    assert _unlisted_modules(package) == ["b"]


# --- docs/ARCHITECTURE.md -----------------------------------------------------------------------------

DOC = SRC.parent.parent / "docs" / "ARCHITECTURE.md"


def _doc_layers(text: str) -> dict[str, float]:
    """package -> layer from the doc's table rows `| L<n> | `pkg`, `pkg` | ...`."""
    found: dict[str, float] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) < 4 or not cells[1].startswith("L"):
            continue
        layer = float(cells[1][1:].replace("½", ".5"))
        for package in cells[2].split(","):
            found[package.strip().strip("`")] = layer
    return found


def test_architecture_doc_lists_every_layer():
    assert _doc_layers(DOC.read_text()) == LAYERS


def test_the_doc_check_has_teeth():
    table = "| L1 | `raft` | core | L0 |\n| L3½ | `replica`, `x` | cycle | L0–L3 |\n"
    assert _doc_layers(table) == {"raft": 1.0, "replica": 3.5, "x": 3.5}


def _doc_server_ranks(text: str) -> dict[str, int]:
    """subpackage -> rank from the doc's server table rows `| <n> | `server.<sub>` | ...`."""
    found: dict[str, int] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) >= 4 and cells[1].isdigit() and cells[2].startswith("`server."):
            found[cells[2].strip("`").removeprefix("server.")] = int(cells[1])
    return found


def test_architecture_doc_ranks_every_server_subpackage():
    """The doc's server table is `SERVER_RANKS`, and `SERVER_RANKS` names every server subpackage."""
    subpackages = {p.parent.name for p in (SRC / "server").glob("*/__init__.py")}
    assert subpackages == set(SERVER_RANKS), f"server subpackages {sorted(subpackages)} vs SERVER_RANKS"
    assert _doc_server_ranks(DOC.read_text()) == SERVER_RANKS


def test_the_server_doc_check_has_teeth():
    table = "| 0 | `server.settings` | config |\n| 2 | `server.groups` | groups |\n| L1 | `raft` | core | L0 |\n"
    assert _doc_server_ranks(table) == {"settings": 0, "groups": 2}
