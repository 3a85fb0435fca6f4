"""`jsraft check DIR`: offline verification of a store directory, a node data directory, or a directory of
node data directories (what `jsraft demo --dir D` and `jsraft cluster up --dir D` leave) (layer L6).

Owns: finding the stores under a directory and checking each one read-only; and saying which stream
replica's store awaits an audit's confirmation (`replica/judgement.py`'s mark beside it): not damage, but
that replica serves no repair and takes no snapshot of its own until an audit agrees with it.

Invariants:
  1. Nothing on disk changes: every store is opened read-only and closed.
  2. Exit 0 clean, 1 damage found, 2 usage error (no such directory, no store under it).

Imports: stdlib, click, L1 (`disk`), L2 (`store`), L3½ (`replica.install_mark`).
"""

from __future__ import annotations

import json
import os

import click

from jsraft.disk import OsDisk
from jsraft.replica.install_mark import AuditMark
from jsraft.store import StoreConfig
from jsraft.store.blocks import parse_block_name
from jsraft.store.filestore import FileStore
from jsraft.store.swap import recovered_path

EXIT_CLEAN, EXIT_DAMAGED, EXIT_USAGE = 0, 1, 2


def _is_store_dir(path: str) -> bool:
    try:
        names = os.listdir(path)
    except OSError:
        return False
    return any(parse_block_name(name) is not None for name in names) or "index" in names


def _msgs_dir(stream_dir: str) -> str:
    """The stream's store directory, or where the next open finds it if a crash interrupted a repair's
    swap of its store (store/swap.py: `msgs.old` or a sealed `msgs.repair-<n>`)."""
    if not os.path.isdir(stream_dir):
        return os.path.join(stream_dir, "msgs")
    return os.path.join(stream_dir, recovered_path(OsDisk(stream_dir, read_only=True), "msgs"))


def _node_stores(root: str, prefix: str = "") -> list[tuple[str, str]]:
    stores: list[tuple[str, str]] = []
    streams = os.path.join(root, "streams")
    if os.path.isdir(streams):
        for name in sorted(os.listdir(streams)):
            msgs = _msgs_dir(os.path.join(streams, name))
            if _is_store_dir(msgs):
                stores.append((prefix + name, msgs))
    return stores


def find_stores(root: str) -> list[tuple[str, str]]:
    """`(name, directory)` of every store at or under `root`: a store dir, a node data dir (its
    `streams/<name>/msgs`), or a directory of node data dirs (named `<node>/<stream>`)."""
    if _is_store_dir(root):
        return [(os.path.basename(os.path.abspath(root)), root)]
    stores = _node_stores(root)
    if stores or os.path.isdir(os.path.join(root, "streams")):
        return stores
    for node in sorted(os.listdir(root)):
        if os.path.isdir(os.path.join(root, node, "streams")):
            stores.extend(_node_stores(os.path.join(root, node), prefix=f"{node}/"))
    return stores


def check_store(name: str, directory: str) -> dict:
    """Verify every record of one store without changing it; return the JSON report entry."""
    store = FileStore.open(OsDisk(directory, read_only=True), StoreConfig(), read_only=True,
                           use_index=False)
    state = store.state()
    faults = [{"first": f.first, "last": f.last, "kind": str(f.kind)} for f in store.faults()]
    torn = store.recovery_report.get("torn_bytes_cut", 0)
    store.close()
    return {
        "name": name, "first_seq": state.first_seq, "last_seq": state.last_seq, "msgs": state.msgs,
        "bytes": state.bytes, "digest": f"{state.digest:016x}", "faults": faults,
        "torn_tail_bytes": torn, "awaits_audit_since": _awaits_audit(directory),
    }


def _awaits_audit(directory: str) -> int | None:
    """The index since which the replica's store awaits an audit's confirmation (its stream directory's
    `audit_pending`, a mark that does not read counting as set at 0), None when it does not."""
    stream_dir = os.path.dirname(os.path.abspath(directory))
    if not os.path.basename(os.path.abspath(directory)).startswith("msgs"):
        return None
    return AuditMark(OsDisk(stream_dir, read_only=True)).pending(damaged=0)


@click.command("check")
@click.argument("dir", metavar="DIR")
@click.option("--json", "as_json", is_flag=True, help="print a JSON report")
def check(dir: str, as_json: bool) -> int:  # noqa: A002 — the argument's name in --help
    """Verify DIR offline: a store directory, a node's data directory, or a directory of node data
    directories. Reads every record and changes nothing; exit 0 clean, 1 damage found, 2 usage error."""
    if not os.path.isdir(dir):
        click.echo(f"jsraft check: no such directory: {dir}", err=True)
        return EXIT_USAGE
    stores = find_stores(dir)
    if not stores:
        click.echo(f"jsraft check: no store found under {dir}", err=True)
        return EXIT_USAGE
    reports = [check_store(name, directory) for name, directory in stores]
    damaged = any(report["faults"] for report in reports)
    if as_json:
        click.echo(json.dumps({"streams": reports, "clean": not damaged}, indent=2))
    else:
        for r in reports:
            click.echo(f"{r['name']}: first_seq={r['first_seq']} last_seq={r['last_seq']} msgs={r['msgs']} "
                       f"bytes={r['bytes']} digest={r['digest']}")
            for fault in r["faults"]:
                click.echo(f"  DAMAGED {fault['first']}..{fault['last']} ({fault['kind']})")
            if r["torn_tail_bytes"]:
                click.echo(f"  torn tail: {r['torn_tail_bytes']} unsynced bytes would be cut on open")
            if r["awaits_audit_since"] is not None:
                click.echo(f"  awaits an audit's confirmation since index {r['awaits_audit_since']} (a repair it "
                           f"could not verify, or an audit it disagreed with): it serves no repair until one agrees")
        click.echo("clean" if not damaged else "damage found: these sequences must be repaired from a peer")
    return EXIT_DAMAGED if damaged else EXIT_CLEAN
