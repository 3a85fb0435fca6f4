"""`jsraft pub`, `jsraft sub`, `jsraft req` and `jsraft account info`: quick checks (layer L6).

Owns: publishing (`--count N` with a `{{Count}}` template in the body, `--jetstream` to wait for each
stream ack), subscribing (`--count N` to stop), one request, and the account's JetStream usage.

Invariants:
  1. `pub` returns only after the server has processed every message sent (a flush; with `--jetstream`,
     each publish's ack), so a following command sees them.

Imports: stdlib, click, cli siblings. Reference: natscli `cli/pub_command.go`, `cli/sub_command.go`,
`cli/account_command.go`.
"""

from __future__ import annotations

import datetime
import json
from typing import Any

import click

from jsraft.cli.session import Failed, Session, client_command


def _header_pairs(values: tuple[str, ...]) -> dict[str, str]:
    headers = {}
    for value in values:
        key, sep, text = value.partition(":")
        if not sep or not key.strip():
            raise click.BadParameter(f"{value!r} is not KEY:VALUE", param_hint="--header")
        headers[key.strip()] = text.strip()
    return headers


def _body(template: str, count: int) -> bytes:
    return template.replace("{{.Count}}", str(count)).replace("{{Count}}", str(count)).encode()


@click.command("pub")
@click.argument("subject")
@click.argument("body", default="")
@click.option("--count", type=click.IntRange(1), default=1, show_default=True,
              help="publish this many messages ({{Count}} in BODY is replaced by the number)")
@click.option("-H", "--header", "headers", multiple=True, metavar="KEY:VALUE", help="a header (repeatable)")
@click.option("-J", "--jetstream", is_flag=True, help="wait for each message's stream ack")
@click.option("-q", "--quiet", is_flag=True, help="print nothing on success")
@client_command
async def pub(session: Session, subject: str, body: str, count: int, headers: tuple[str, ...], jetstream: bool,
              quiet: bool) -> None:
    """Publish BODY to SUBJECT; returns once the server has them all."""
    header_map = _header_pairs(headers) or None
    last: dict[str, Any] = {}
    for number in range(1, count + 1):
        payload = _body(body, number)
        if jetstream:
            msg = await session.client.request(subject, payload, timeout=session.timeout_s, headers=header_map)
            last = json.loads(msg.data)
            if "error" in last:
                raise Failed(f"{last['error'].get('description')} (err_code {last['error'].get('err_code')})")
        else:
            await session.client.publish(subject, payload, headers=header_map)
    await session.client.flush(timeout=max(session.timeout_s, 30.0))
    if session.out.as_json and jetstream:
        session.out.json(last)
    elif not quiet:
        what = f"{count} messages" if count > 1 else f"{len(_body(body, 1))} bytes"
        click.echo(f"Published {what} to {subject!r}" + (f" (stream {last.get('stream')} seq {last.get('seq')})"
                                                        if jetstream else ""))


@click.command("sub")
@click.argument("subject")
@click.option("--count", type=click.IntRange(0), default=0, help="stop after this many messages (0: run until ^C)")
@click.option("--queue", help="subscribe in this queue group")
@click.option("--raw", is_flag=True, help="print only the payloads")
@client_command
async def sub(session: Session, subject: str, count: int, queue: str | None, raw: bool) -> None:
    """Print the messages published on SUBJECT."""
    subscription = await session.client.subscribe(subject, queue, max_msgs=count)
    await session.client.flush()
    if not raw:
        click.echo(f"Subscribing on {subject}", err=True)
    seen = 0
    async for msg in subscription:
        seen += 1
        if raw:
            click.echo(msg.data.decode(errors="replace"))
            continue
        click.echo(f"[#{seen}] Received on {msg.subject!r}" + (f" with reply {msg.reply!r}" if msg.reply else ""))
        for key, value in (msg.headers or {}).items():
            click.echo(f"{key}: {value}")
        click.echo(msg.data.decode(errors="replace"))
        click.echo()
        if count and seen >= count:
            break


@click.command("req")
@click.argument("subject")
@click.argument("body", default="")
@click.option("-H", "--header", "headers", multiple=True, metavar="KEY:VALUE", help="a header (repeatable)")
@click.option("--raw", is_flag=True, help="print only the reply's payload")
@client_command
async def req(session: Session, subject: str, body: str, headers: tuple[str, ...], raw: bool) -> None:
    """Send BODY to SUBJECT and print the first reply."""
    msg = await session.client.request(subject, body.encode(), timeout=session.timeout_s,
                                       headers=_header_pairs(headers) or None)
    if not raw:
        click.echo(f"[{datetime.datetime.now():%H:%M:%S}] Received with rtt on {msg.subject!r}")
        for key, value in (msg.headers or {}).items():
            click.echo(f"{key}: {value}")
    click.echo(msg.data.decode(errors="replace"))


@click.group("account")
def account() -> None:
    """Account information."""


@account.command("info")
@client_command
async def account_info(session: Session) -> None:
    """The account's JetStream usage and limits ($JS.API.INFO)."""
    answer = await session.api("INFO")
    if session.out.as_json:
        return session.out.json(answer)
    limits = answer.get("limits") or {}
    api = answer.get("api") or {}
    session.out.fields("JetStream Account Information", [
        ("Memory", answer.get("memory", 0)), ("Storage", answer.get("storage", 0)),
        ("Streams", answer.get("streams", 0)), ("Consumers", answer.get("consumers", 0)),
        ("API Requests", api.get("total", 0)), ("API Errors", api.get("errors", 0)),
        ("API Level", api.get("level", "")),
        ("Max Memory", limits.get("max_memory", -1)), ("Max Storage", limits.get("max_storage", -1)),
        ("Max Streams", limits.get("max_streams", -1)), ("Max Consumers", limits.get("max_consumers", -1))])
