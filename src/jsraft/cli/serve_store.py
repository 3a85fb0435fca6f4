"""Where `jsraft serve` keeps its store when no directory is given, and the name it then uses (layer L6).

Owns: `with_defaults` (the store directory and node name for whichever of the two neither a flag nor the
config file gave), `jetstream_asked` (`-js`, or a nats-server file's `jetstream` key), `DEFAULT_STORE_DIR`
and `private_store_dir`.

Invariants:
  1. Asked for JetStream with no directory, a node uses nats-server's shared default (under `$TMPDIR`),
     so a restart finds its streams again. Not asked, it uses a directory private to its process
     (`private-<pid>`): nats-server without `-js` keeps nothing on disk and several run side by side.
  2. A private directory is removed when its node stops (`cmd_serve`), and one whose process is gone (a
     SIGKILLed node) by the next `private_store_dir` call; a live process's is never touched.

Imports: stdlib, L5 (`server.identity`, `server.config_file`, `server.nats_conf`), `cli.processes`.
Reference: nats-server's `-js` and `store_dir` defaults.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import tempfile
from typing import Any

from jsraft.cli.processes import is_alive
from jsraft.server.settings.config_file import config_format
from jsraft.server.settings.identity import default_node_name
from jsraft.server.settings.nats_conf import parse_nats_conf, read_text

# nats-server keeps JetStream under <tmp>/nats/jetstream when given no store directory; jsraft beside it.
DEFAULT_STORE_DIR = os.path.join(tempfile.gettempdir(), "jsraft", "jetstream")
PRIVATE_PREFIX = "private-"  # + pid: private_store_dir()


def with_defaults(fields: dict[str, Any], jetstream: bool = True) -> dict[str, Any]:
    """nats-server needs neither a name nor a store directory: the default store directory (invariant 1:
    shared if `jetstream` was asked for, else private), and the name that directory already holds (else a
    new one), for whichever neither a flag nor the file gave."""
    store_dir = fields.get("store_dir") or (DEFAULT_STORE_DIR if jetstream else private_store_dir())
    return {"store_dir": store_dir, "name": fields.get("name") or default_node_name(store_dir), **fields}


def jetstream_asked(args: argparse.Namespace) -> bool:
    """`-js`, or a nats-server config file with a `jetstream` key that does not turn it off."""
    if args.jetstream:
        return True
    if args.config is None:
        return False
    text = read_text(args.config)
    if config_format(args.config, text) != "nats":
        return False
    value = parse_nats_conf(text, args.config).get("jetstream")
    return value is not None and value not in (False, "disabled", "disable")


def private_store_dir() -> str:
    """This process's private store directory (invariant 1; not created here), after removing those of
    processes that are gone (invariant 2)."""
    base = os.path.join(tempfile.gettempdir(), "jsraft")
    with contextlib.suppress(OSError):
        for entry in os.listdir(base):
            pid = entry.removeprefix(PRIVATE_PREFIX)
            if entry.startswith(PRIVATE_PREFIX) and pid.isdigit() and not is_alive(int(pid)):
                shutil.rmtree(os.path.join(base, entry), ignore_errors=True)
    return os.path.join(base, f"{PRIVATE_PREFIX}{os.getpid()}")
