"""The `jsraft` command (layer L6): a click group of subcommands, each in its own module.

Owns: the top-level group (`jsraft --version`, `--help`), `demo`, the hand-off of `serve`'s raw arguments to
its argparse parser (`serve` keeps nats-server's spellings — `-sd`, `-js`, Go-style `-port=4222` — which
click cannot parse), `main` (exit status from any command), and the quiet end of a command whose output
pipe was closed (`jsraft demo | head`). The commands' functions are named `*_command` where a submodule has the
command's name (`jsraft.cli.demo`, `jsraft.cli.serve` stay the modules). Subcommands:
  - `check DIR` (`check_cmd`): offline verification of a store or data directory. Exit 0/1/2.
  - `serve …` (`serve`): one node as a process. Exit 0 clean stop, 1 node failed, 2 configuration error.
  - `demo [--dir D] [--messages N] [--store]` (`demo`, `store_demo`): the quick-start job.
  - `stream …`, `consumer …` (`stream_cmd`, `consumer_cmd`, `report_cmd`): administration like the `nats`
    CLI; `pub`, `sub`, `req`, `account info` (`msg_cmd`); `stream backup|restore`, `backup`, `restore`
    (`backup_cmd`); `cluster up|down|status` (`cluster_cmd`); `server report` (`report_cmd`).

Invariants:
  1. Exit status: 0 success, 1 failure, 2 usage error, for every subcommand (session invariant 1).
  2. A closed stdout (the reader went away) ends the command without a traceback, after its cleanup ran.
  3. Importing this package imports no subcommand's module: each is imported when its command is looked
     up (`LAZY_COMMANDS`; `serve`'s parser in `build_parser`), so `jsraft serve` starts without the client
     commands' modules (tests/cli/test_lazy_commands.py).
  4. `serve` binds its client port (`cli.early_listen`) before importing anything of the node, so a client
     that connects while the node starts waits for INFO instead of being refused.

Imports: stdlib, click, L5 (`server`, through `serve` and `demo`), cli siblings.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Any

import click

from jsraft import __version__

__all__ = ["build_parser", "cli", "main"]

EXIT_FAILED, EXIT_USAGE = 1, 2  # invariant 1
# Invariant 3: command name -> "module:attribute", imported when the command is looked up.
LAZY_COMMANDS = {
    "check": "jsraft.cli.check_cmd:check",
    "stream": "jsraft.cli.stream_cmd:stream",
    "consumer": "jsraft.cli.consumer_cmd:consumer",
    "pub": "jsraft.cli.msg_cmd:pub",
    "sub": "jsraft.cli.msg_cmd:sub",
    "req": "jsraft.cli.msg_cmd:req",
    "account": "jsraft.cli.msg_cmd:account",
    "backup": "jsraft.cli.backup_cmd:backup",
    "restore": "jsraft.cli.backup_cmd:restore",
    "cluster": "jsraft.cli.cluster_cmd:cluster",
    "server": "jsraft.cli.report_cmd:server",
}
# subcommands of `stream` that live in other modules, added when `stream` is loaded (`report_cmd` adds
# `stream report` itself, with `@stream.command`, when it is imported)
_STREAM_EXTRAS = ("jsraft.cli.backup_cmd:stream_backup", "jsraft.cli.backup_cmd:stream_restore",
                  "jsraft.cli.group_cmd:stream_group", "jsraft.cli.group_cmd:stream_accept_loss")
_STREAM_MODULES = ("jsraft.cli.report_cmd",)


def _load(target: str) -> Any:
    module, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module), attribute)


class LazyGroup(click.Group):
    """A click group whose `LAZY_COMMANDS` are imported on first lookup (click's documented lazy-group
    pattern), so `jsraft serve` does not pay for the client commands' modules."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *LAZY_COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in LAZY_COMMANDS:
            command = _load(LAZY_COMMANDS[cmd_name])
            if cmd_name == "stream":
                for extra in _STREAM_EXTRAS:
                    command.add_command(_load(extra))
                for module in _STREAM_MODULES:
                    importlib.import_module(module)
            self.add_command(command, cmd_name)
        return super().get_command(ctx, cmd_name)


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser `jsraft serve`'s raw arguments are handed to (`serve` owns its flags)."""
    from jsraft.cli.serve import add_parser as add_serve_parser

    parser = argparse.ArgumentParser(prog="jsraft", description="jsraft: a JetStream-compatible store")
    sub_parsers = parser.add_subparsers(dest="command", required=True)
    add_serve_parser(sub_parsers)
    return parser


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", "-V", prog_name="jsraft", message="%(prog)s %(version)s")
def cli() -> None:
    """jsraft: a JetStream-compatible, Raft-replicated message store, and its operator's tool.

    Client commands find the cluster with --server (comma-separated URLs) or $NATS_URL.
    """


@cli.command("serve", add_help_option=False,
             context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def serve_command(args: tuple[str, ...]) -> int:
    """Run one node (flags and/or --config FILE; nats-server's spellings work). `jsraft serve --help` lists
    the flags."""
    from jsraft.cli.early_listen import bind_early

    early = bind_early(list(args))  # before the node's modules are imported (invariant 4)
    try:
        namespace = build_parser().parse_args(["serve", *args])
    except SystemExit as exit_:
        if early is not None:
            early.sock.close()
        return EXIT_USAGE if exit_.code else 0
    return namespace.func(namespace, early)


@cli.command("demo")
@click.option("--dir", "directory", metavar="D",
              help="data directory (default: a temporary one, removed after a pass); `jsraft check D` reads it")
@click.option("--messages", type=int, metavar="N", help="messages to publish first (default 5000; --store: 20000)")
@click.option("--store", is_flag=True, help="the single-store demo instead (write, reopen, verify)")
def demo_command(directory: str | None, messages: int | None, store: bool) -> int:
    """A local 3-node cluster loses its stream leader, and no acknowledged message."""
    if messages is not None and messages < 1:
        click.echo("jsraft demo: --messages must be at least 1", err=True)
        return EXIT_USAGE
    if store:
        from jsraft.cli.store_demo import run_demo

        return run_demo(directory or "demo-data", messages or 20_000)
    from jsraft.cli.demo import run_cluster_demo

    return run_cluster_demo(directory, messages or 5_000)


def _broken_pipe(error: BaseException) -> bool:
    if isinstance(error, BrokenPipeError):
        return True
    if isinstance(error, BaseExceptionGroup):
        return all(_broken_pipe(inner) for inner in error.exceptions)
    return False


def _quiet_stdout() -> None:
    """Invariant 2: point stdout at /dev/null so the interpreter's final flush does not complain."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def main(argv: list[str] | None = None) -> int:
    """Run `jsraft` with `argv` (default: the process's arguments) and return its exit status."""
    try:
        result: Any = cli.main(args=argv, prog_name="jsraft", standalone_mode=False)
    except click.exceptions.Exit as exit_:
        return exit_.exit_code
    except click.ClickException as error:
        error.show()
        return error.exit_code
    except click.Abort:
        click.echo("Aborted!", err=True)
        return EXIT_FAILED
    except KeyboardInterrupt:  # ^C is how `jsraft sub` without --count ends
        return 130
    except BaseException as error:  # noqa: BLE001 — only a closed pipe is swallowed
        if not _broken_pipe(error):
            raise
        _quiet_stdout()
        return 0
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
