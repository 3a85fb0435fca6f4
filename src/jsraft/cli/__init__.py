"""The `jsraft` command (layer L6).

Owns: argument parsing and presentation. Subcommands:
  - `jsraft check DIR [--json]`: offline verification of a store directory, or of every store under a
    node data directory (`streams/<name>/msgs`). Changes nothing on disk. Exit 0 clean, 1 damage found,
    2 usage error.
  - `jsraft serve [flags] [--config FILE]`: one node as a process, with its monitoring HTTP (`serve`).
    Exit 0 after a clean stop (SIGTERM/SIGINT), 1 if the node failed, 2 configuration error.
  - `jsraft demo [--dir D] [--messages N]`: the quick-start job: a local 3-node cluster loses its stream
    leader and loses no acknowledged message (`demo`). Exit 0 when every check passed, 1 otherwise.
    `jsraft demo --store` runs the older single-store demo (`store_demo`).

Imports: stdlib, L2 (`store`, `disk`: for `check`), L5 (`server`), cli siblings.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from jsraft.cli.serve import add_parser as add_serve_parser
from jsraft.disk import OsDisk
from jsraft.errors import JsraftError
from jsraft.store import StoreConfig
from jsraft.store.blocks import parse_block_name
from jsraft.store.filestore import FileStore

EXIT_CLEAN, EXIT_DAMAGED, EXIT_USAGE = 0, 1, 2


def _is_store_dir(path: str) -> bool:
    try:
        names = os.listdir(path)
    except OSError:
        return False
    return any(parse_block_name(name) is not None for name in names) or "index" in names


def find_stores(root: str) -> list[tuple[str, str]]:
    """`(name, directory)` of every store at or under `root` (a store dir or a node data dir)."""
    if _is_store_dir(root):
        return [(os.path.basename(os.path.abspath(root)), root)]
    stores: list[tuple[str, str]] = []
    streams = os.path.join(root, "streams")
    if os.path.isdir(streams):
        for name in sorted(os.listdir(streams)):
            msgs = os.path.join(streams, name, "msgs")
            if _is_store_dir(msgs):
                stores.append((name, msgs))
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
        "torn_tail_bytes": torn,
    }


def cmd_check(args: argparse.Namespace) -> int:
    if not os.path.isdir(args.dir):
        print(f"jsraft check: no such directory: {args.dir}", file=sys.stderr)
        return EXIT_USAGE
    stores = find_stores(args.dir)
    if not stores:
        print(f"jsraft check: no store found under {args.dir}", file=sys.stderr)
        return EXIT_USAGE
    reports = [check_store(name, directory) for name, directory in stores]
    damaged = any(report["faults"] for report in reports)
    if args.json:
        print(json.dumps({"streams": reports, "clean": not damaged}, indent=2))
    else:
        for r in reports:
            print(f"{r['name']}: first_seq={r['first_seq']} last_seq={r['last_seq']} msgs={r['msgs']} "
                  f"bytes={r['bytes']} digest={r['digest']}")
            for fault in r["faults"]:
                print(f"  DAMAGED {fault['first']}..{fault['last']} ({fault['kind']})")
            if r["torn_tail_bytes"]:
                print(f"  torn tail: {r['torn_tail_bytes']} unsynced bytes would be cut on open")
        print("clean" if not damaged else "damage found: these sequences must be repaired from a peer")
    return EXIT_DAMAGED if damaged else EXIT_CLEAN


def cmd_demo(args: argparse.Namespace) -> int:
    if args.messages is not None and args.messages < 1:
        print("jsraft demo: --messages must be at least 1", file=sys.stderr)
        return EXIT_USAGE
    if args.store:
        from jsraft.cli.store_demo import run_demo

        return run_demo(args.dir or "demo-data", args.messages or 20_000)
    from jsraft.cli.demo import run_cluster_demo

    return run_cluster_demo(args.dir, args.messages or 5_000)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="jsraft", description="jsraft: a JetStream-compatible store")
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="verify a store or node data directory offline")
    check.add_argument("dir")
    check.add_argument("--json", action="store_true", help="print a JSON report")
    check.set_defaults(func=cmd_check)
    demo = sub.add_parser("demo", help="a local 3-node cluster loses its stream leader, and no acked message")
    demo.add_argument("--dir", help="data directory (default: a temporary one, removed after a pass)")
    demo.add_argument("--messages", type=int, help="messages to publish first (default 5000; --store: 20000)")
    demo.add_argument("--store", action="store_true", help="the single-store demo instead (write, reopen, verify)")
    demo.set_defaults(func=cmd_demo)
    add_serve_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        return EXIT_USAGE if exit_.code else EXIT_CLEAN
    try:
        return args.func(args)
    except JsraftError as error:
        print(f"jsraft {args.command}: {error} (err_code {error.err_code})", file=sys.stderr)
        return EXIT_DAMAGED


if __name__ == "__main__":
    sys.exit(main())
