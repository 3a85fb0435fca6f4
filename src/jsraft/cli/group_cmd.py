"""`jsraft stream group` and `jsraft stream accept-loss`: a stream's Raft group for the operator (layer L6).

Owns: `stream group NAME` (each replica's role, term, indexes, and whether and why it is repairing, from
`$JSRAFT.API.STREAM.GROUP.<stream>`; `--json` for the raw answer) and `stream accept-loss NAME --replica R`
(`$JSRAFT.API.STREAM.ACCEPT_LOSS.<stream>`, the way out of a halt when a majority of the group lost data;
README "When a group cannot recover by itself").

Invariants:
  1. `accept-loss` sends nothing unless the stream's name was typed back on a terminal, or given as
     `--yes-i-accept-data-loss NAME` (the same name; anywhere else without it, a usage error). The server
     checks the confirmation again (server `group_ops` invariant 1).

Imports: stdlib, click, cli siblings.
"""

from __future__ import annotations

from typing import Any

import click

from jsraft.cli.session import Failed, Session, client_command, is_terminal

API = "$JSRAFT.API."


@click.command("group")
@click.argument("name")
@client_command
async def stream_group(session: Session, name: str) -> None:
    """Show each replica of stream NAME's Raft group: role, term, indexes, repairing and why."""
    answer = await session.api(f"STREAM.GROUP.{name}", prefix=API)
    if session.out.as_json:
        session.out.json(answer)
        return
    rows = []
    for r in answer["replicas"]:
        if r.get("offline"):
            rows.append([r["node"], "offline", "", "", "", "", r.get("error", "")])
            continue
        why = r["repair_reason"] if r["repairing"] else ""
        rows.append([r["node"], r["role"], r["term"], r["last_index"], r["commit_index"],
                     "yes" if r["repairing"] else "no", why or ""])
    session.out.table(f"Raft group {answer['group']} of stream {name}",
                      ["Replica", "Role", "Term", "Last", "Commit", "Repairing", "Why"], rows)
    halted = {r["halted_reason"] for r in answer["replicas"] if r.get("halted_reason")}
    for reason in sorted(halted):
        session.out.line(reason, style="bold red")


@click.command("accept-loss")
@click.argument("name")
@click.option("--replica", "replicas", multiple=True, required=True,
              help="a repairing replica (server name) that may give up what only it held; repeatable")
@click.option("--yes-i-accept-data-loss", "confirmed", metavar="NAME",
              help="confirm without a terminal by giving the stream's name again")
@client_command
async def stream_accept_loss(session: Session, name: str, replicas: tuple[str, ...], confirmed: str | None) -> None:
    """Let stream NAME's halted group elect a leader again by having repairing replicas give up the
    entries they cannot recover. Use only when `stream group NAME` shows the group cannot recover by
    itself (a majority lost its data)."""
    confirm = confirmed if confirmed is not None else _typed_name(name)
    if confirm != name:
        raise click.UsageError(f"the confirmation {confirm!r} is not the stream's name {name!r}: nothing done")
    answer = await session.api(f"STREAM.ACCEPT_LOSS.{name}", {"confirm": confirm, "replicas": list(replicas)},
                               prefix=API, timeout_s=max(session.timeout_s, 10.0))
    if session.out.as_json:
        session.out.json(answer)
        return
    for accepted in answer["accepted"]:
        session.out.line(f"{accepted['node']}: accepted data loss, kept its log through "
                         f"{accepted['kept_through']}, gave up {_range(accepted['given_up'])}")
    for node in answer["left_repairing"]:
        session.out.line(f"{node}: left repairing (a quorum is healthy without it); it repairs from the leader")


def _typed_name(name: str) -> str:
    if not is_terminal():
        raise click.UsageError("accepting data loss needs the stream's name typed on a terminal, "
                               "or --yes-i-accept-data-loss NAME")
    click.echo(f"This makes the named replicas of {name} give up every entry they cannot verify; what only "
               "they held is lost for good.")
    typed = click.prompt("Type the stream's name to accept the loss", default="", show_default=False)
    if typed != name:
        raise Failed("cancelled: the name typed is not the stream's")
    return typed


def _range(given_up: dict[str, Any] | None) -> str:
    return f"entries {given_up['first']}..{given_up['last']}" if given_up else "nothing it knew of"
