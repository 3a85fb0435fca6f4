"""What every client command of `jsraft` shares: the connection options, the JetStream API request, the
output (tables on a terminal, plain text when piped, raw JSON with `--json`), prompts, and exit codes
(layer L6).

Owns: `connection_options` (the `--server`/`NATS_URL`, `--timeout`, `--json` options every client command
takes), `client_command` (runs a command's coroutine under trio with a connected `Session`), `Session.api`
(one `$JS.API.<tail>` request; its answer raw, or `ApiFailure` with the server's `code`, `err_code` and
description), `Output` (rich tables and colours on a terminal, tab-separated lines otherwise), `ask` (a
prompt on a terminal, a usage error anywhere else), durations in the `nats` CLI's spelling (`2m`, `1h`,
`1y`), and `fail` (one line on stderr, exit status).

Invariants:
  1. Exit status: 0 success, 1 the operation failed (an API error, a connection failure, a timeout), 2 a
     usage error (a missing or malformed argument, as `jsraft check` does). An API error is printed with
     its JetStream `err_code` and description.
  2. Nothing is ever prompted for when stdin is not a terminal: the missing value is a usage error (2)
     that names the option that gives it.
  3. `--json` prints the API's answer exactly as received (re-indented), nothing else on stdout.
  4. Server URLs are tried in the order given (`--server a,b,c`, else `NATS_URL`, else
     nats://127.0.0.1:4222); the first that accepts the connection is used.

Imports: stdlib, click, rich, trio, L0 (`errors`), L4 (`client`). Reference: the `nats` CLI
(github.com/nats-io/natscli) for verbs, flags and defaults.
"""

from __future__ import annotations

import functools
import json
import os
import re
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import click
import trio
from rich.console import Console
from rich.table import Table

from jsraft.client import Client, connect
from jsraft.client.errors import ClientError
from jsraft.errors import JsraftError

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
DEFAULT_URL = "nats://127.0.0.1:4222"
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ns|us|ms|s|m|h|d|w|y)?\s*$")
_UNIT_NS = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 10**9, "m": 60 * 10**9, "h": 3600 * 10**9,
            "d": 86400 * 10**9, "w": 7 * 86400 * 10**9, "y": 365 * 86400 * 10**9}


class ApiFailure(click.ClickException):
    """A JetStream API error answer (invariant 1): printed with its codes, exit status 1."""

    exit_code = EXIT_FAILED

    def __init__(self, error: dict[str, Any]) -> None:
        self.error = error
        super().__init__(f"{error.get('description', 'error')} (err_code {error.get('err_code', '?')}, "
                         f"code {error.get('code', '?')})")


class Failed(click.ClickException):
    """An operation that did not succeed (exit 1), as opposed to a usage error (exit 2)."""

    exit_code = EXIT_FAILED


def parse_duration_ns(text: str) -> int:
    """`"2m"` -> 120e9; a bare number is seconds; `-1`/`0` mean unlimited (0)."""
    if text.strip() in ("-1", "0", "unlimited"):
        return 0
    match = _DURATION.match(text)
    if match is None:
        raise click.BadParameter(f"{text!r} is not a duration (e.g. 500ms, 30s, 2m, 1h, 1d, 1y)")
    return int(float(match.group(1)) * _UNIT_NS[match.group(2) or "s"])


def format_duration_ns(ns: int) -> str:
    if not ns:
        return "unlimited"
    for unit in ("y", "d", "h", "m", "s", "ms"):
        if ns % _UNIT_NS[unit] == 0:
            return f"{ns // _UNIT_NS[unit]}{unit}"
    return f"{ns}ns"


def parse_size(text: str) -> int:
    """`"1GB"`, `"512KiB"`, `"100"`, `"-1"` (unlimited) -> bytes."""
    match = re.match(r"^\s*(-?\d+)\s*([KMGT]?)(i?B)?\s*$", text, re.IGNORECASE)
    if match is None:
        raise click.BadParameter(f"{text!r} is not a size (e.g. 100, 512KB, 1GB, -1 for unlimited)")
    value, unit = int(match.group(1)), match.group(2).upper()
    return value * (1024 ** " KMGT".index(unit)) if unit and value > 0 else value


def is_terminal() -> bool:
    return sys.stdin.isatty()


def ask(option: str, prompt: str, *, default: Any = None, kind: Any = str) -> Any:
    """The value of a missing option: prompted for on a terminal, a usage error otherwise (invariant 2)."""
    if not is_terminal():
        raise click.UsageError(f"{option} is required (give it, or run on a terminal to be asked)")
    return click.prompt(prompt, default=default, type=kind)


def confirm(question: str, force: bool) -> None:
    """Go on if `force` or the user says yes on a terminal; a usage error without a terminal."""
    if force:
        return
    if not is_terminal():
        raise click.UsageError(f"{question} — refusing without -f/--force when not on a terminal")
    if not click.confirm(question, default=False):
        raise Failed("cancelled")


class Output:
    """Tables and colours on a terminal, tab-separated text when piped (rich decides from stdout)."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        self.console = Console(highlight=False, soft_wrap=True)
        self.rich = self.console.is_terminal

    def json(self, data: Any) -> None:
        click.echo(json.dumps(data, indent=2))

    def line(self, text: str = "", style: str | None = None) -> None:
        if self.rich and style:
            self.console.print(text, style=style, markup=False)
        else:
            click.echo(text)

    def table(self, title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        if self.rich:
            table = Table(title=title, show_lines=False)
            for column in columns:
                table.add_column(column, overflow="fold")
            for row in rows:
                table.add_row(*(str(cell) for cell in row))
            self.console.print(table)
            return
        click.echo("\t".join(columns))
        for row in rows:
            click.echo("\t".join(str(cell) for cell in row))

    def fields(self, title: str, pairs: Sequence[tuple[str, Any]]) -> None:
        """A `nats str info`-style block: a heading, then right-aligned `name: value` lines."""
        self.line(title + ":", style="bold")
        width = max((len(name) for name, _ in pairs), default=0)
        for name, value in pairs:
            click.echo(f"  {name.rjust(width)}: {value}")
        click.echo()


class Session:
    """A connected client plus the command's output settings."""

    def __init__(self, client: Client, out: Output, timeout_s: float) -> None:
        self.client = client
        self.out = out
        self.timeout_s = timeout_s

    async def api(self, tail: str, body: dict[str, Any] | bytes | None = None, *,
                  timeout_s: float | None = None, prefix: str = "$JS.API.") -> dict[str, Any]:
        """The raw answer of `$JS.API.<tail>` (or jsraft's own `$JSRAFT.API.<tail>` with that `prefix`);
        `ApiFailure` if it carries an error (invariant 1)."""
        payload = body if isinstance(body, bytes) else json.dumps(body).encode() if body is not None else b""
        msg = await self.client.request(f"{prefix}{tail}", payload, timeout=timeout_s or self.timeout_s)
        try:
            answer = json.loads(msg.data)
        except ValueError:
            raise Failed(f"{prefix}{tail}: the answer is not JSON: {msg.data[:120]!r}") from None
        if isinstance(answer, dict) and "error" in answer:
            raise ApiFailure(answer["error"] if isinstance(answer["error"], dict) else {"description": str(answer)})
        return answer

    async def pages(self, tail: str, key: str, body: dict[str, Any] | None = None) -> list[Any]:
        """Every item of a paged listing (`offset`/`total`)."""
        found: list[Any] = []
        while True:
            answer = await self.api(tail, {**(body or {}), "offset": len(found)})
            page = answer.get(key) or []
            found.extend(page)
            if not page or len(found) >= int(answer.get("total", 0)):
                return found


def server_urls(server: str | None) -> list[str]:
    """Invariant 4."""
    text = server or os.environ.get("NATS_URL") or DEFAULT_URL
    urls = [part.strip() for part in text.split(",") if part.strip()]
    if not urls:
        raise click.UsageError("--server names no server")
    return urls


async def open_client(urls: list[str], timeout_s: float) -> Client:
    errors = []
    for url in urls:
        try:
            return await connect(url, name="jsraft-cli", connect_timeout_s=timeout_s)
        except JsraftError as error:
            errors.append(str(error))
    raise Failed("cannot connect: " + "; ".join(errors))


def connection_options(function: Callable[..., Any]) -> Callable[..., Any]:
    """`--server`, `--timeout`, `--json` on a client command."""
    for decorator in reversed((
        click.option("-s", "--server", envvar="NATS_URL", metavar="URL[,URL...]",
                     help="NATS server URLs, comma-separated, tried in order (default $NATS_URL, else "
                          "nats://127.0.0.1:4222)"),
        click.option("--timeout", type=float, default=5.0, show_default=True, metavar="SECONDS",
                     help="how long to wait for each answer"),
        click.option("-j", "--json", "as_json", is_flag=True, help="print the raw JSON API answer"),
    )):
        function = decorator(function)
    return function


def client_command(function: Callable[..., Awaitable[None]]) -> Callable[..., None]:
    """Run `function(session, **params)` under trio with a connected client, mapping errors to exit codes."""

    @connection_options
    @functools.wraps(function)
    def wrapper(server: str | None, timeout: float, as_json: bool, **params: Any) -> None:
        urls = server_urls(server)

        async def run() -> None:
            client = await open_client(urls, timeout)
            try:
                await function(Session(client, Output(as_json), timeout), **params)
            finally:
                await client.close()

        try:
            trio.run(run)
        except click.ClickException:
            raise
        except (ClientError, JsraftError) as error:  # invariant 1
            raise Failed(f"{error.description} (err_code {error.err_code})") from None

    return wrapper

