"""`jsraft stream …`: stream administration with the `nats` CLI's verbs, flags and defaults (layer L6).

Owns: `stream add` (flags, `--config FILE.json`, prompts on a terminal for what is missing), `ls`, `info`,
`edit`, `cp`, `rm`, `purge` (`--subject`, `--seq`, `--keep`), `get`, `rmm` (remove one message), and
`report` (in `report_cmd`); backup and restore are in `backup_cmd`. Each is one JetStream API request
(`Session.api`), printed as the `nats` CLI prints it, or raw with `--json`.

Invariants:
  1. A destructive verb (`rm`, `purge`, `rmm`, `edit`) asks for confirmation on a terminal and needs
     `-f/--force` anywhere else (session invariant 2).
  2. `add`/`edit`/`cp` send exactly the config built from the flags over the base (`--config` file, the
     copied stream's config, or the existing config); an option not given leaves the base's value.

Imports: stdlib, click, cli siblings. Reference: natscli `cli/stream_command.go`.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import click

from jsraft.cli.session import (
    Session, ask, client_command, confirm, format_duration_ns, is_terminal, parse_duration_ns, parse_size,
)

STORAGE = click.Choice(["file", "memory"])
RETENTION = click.Choice(["limits", "interest", "workq", "work"])


def _config_options(function: Any) -> Any:
    """The stream config flags shared by `add`, `edit` and `cp` (natscli spellings)."""
    options = (
        click.option("--subjects", help="subjects the stream takes, comma-separated (e.g. 'ORDERS.*')"),
        click.option("--description", help="a description of the stream"),
        click.option("--storage", type=STORAGE, help="storage backend (default file)"),
        click.option("--retention", type=RETENTION, help="retention policy (default limits)"),
        click.option("--discard", type=click.Choice(["old", "new"]), help="discard policy when full (default old)"),
        click.option("--replicas", "-R", type=int, help="number of replicas (default 1)"),
        click.option("--max-msgs", type=int, help="maximum messages kept (-1 unlimited)"),
        click.option("--max-bytes", help="maximum bytes kept, e.g. 1GB (-1 unlimited)"),
        click.option("--max-age", help="maximum message age, e.g. 1y, 2h (-1 unlimited)"),
        click.option("--max-msg-size", help="largest message accepted, e.g. 1MB (-1 unlimited)"),
        click.option("--max-msgs-per-subject", type=int, help="messages kept per subject (-1 unlimited)"),
        click.option("--dupe-window", help="duplicate detection window, e.g. 2m"),
        click.option("--allow-rollup/--no-allow-rollup", default=None, help="allow Nats-Rollup headers"),
        click.option("--deny-delete/--allow-delete", default=None, help="refuse message deletes"),
        click.option("--deny-purge/--allow-purge", default=None, help="refuse purges"),
        click.option("--ack/--no-ack", default=None, help="acknowledge publishes (default) or not"),
        click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False),
                     help="a JSON file with the whole stream config (flags override it)"),
    )
    for option in reversed(options):
        function = option(function)
    return function


def apply_flags(base: dict[str, Any], flags: dict[str, Any]) -> dict[str, Any]:
    """Invariant 2: the config `base` with every given flag set on it."""
    config = dict(base)
    if flags.get("config_file"):
        with open(flags["config_file"]) as handle:
            try:
                config.update(json.load(handle))
            except ValueError as error:
                raise click.BadParameter(f"{flags['config_file']}: not JSON: {error}") from None
    simple = {"description": "description", "storage": "storage", "discard": "discard",
              "replicas": "num_replicas", "max_msgs": "max_msgs", "max_msgs_per_subject": "max_msgs_per_subject",
              "allow_rollup": "allow_rollup_hdrs", "deny_delete": "deny_delete", "deny_purge": "deny_purge"}
    for flag, field in simple.items():
        if flags.get(flag) is not None:
            config[field] = flags[flag]
    if flags.get("ack") is not None:
        config["no_ack"] = not flags["ack"]
    if flags.get("subjects") is not None:
        config["subjects"] = [s.strip() for s in flags["subjects"].split(",") if s.strip()]
    if flags.get("retention") is not None:
        config["retention"] = "workqueue" if flags["retention"] in ("workq", "work") else flags["retention"]
    for flag, field in (("max_bytes", "max_bytes"), ("max_msg_size", "max_msg_size")):
        if flags.get(flag) is not None:
            config[field] = parse_size(flags[flag])
    for flag, field in (("max_age", "max_age"), ("dupe_window", "duplicate_window")):
        if flags.get(flag) is not None:
            config[field] = parse_duration_ns(flags[flag])
    return config


def _prompt_missing(config: dict[str, Any], defaults: bool) -> None:
    """The values `nats str add` asks for; without a terminal only the subjects are required."""
    if not config.get("subjects"):
        if defaults:
            config["subjects"] = [config["name"]]
        else:
            text = ask("--subjects", "Subjects", default=config["name"])
            config["subjects"] = [s.strip() for s in text.split(",") if s.strip()]
    if defaults or not is_terminal():
        return
    for field, prompt, default, kind in (
            ("storage", "Storage", "file", STORAGE), ("retention", "Retention Policy", "limits",
                                                      click.Choice(["limits", "interest", "workqueue"])),
            ("discard", "Discard Policy", "old", click.Choice(["old", "new"])),
            ("num_replicas", "Replicas", 1, int)):
        if field not in config:
            config[field] = click.prompt(prompt, default=default, type=kind)


@click.group("stream")
def stream() -> None:
    """Stream administration (the `nats stream` verbs)."""


@stream.command("add")
@click.argument("name", required=False)
@_config_options
@click.option("--defaults", is_flag=True, help="use defaults for every value not given (no prompts)")
@client_command
async def stream_add(session: Session, name: str | None, defaults: bool, **flags: Any) -> None:
    """Create stream NAME (prompting on a terminal for what is missing)."""
    config = apply_flags({}, flags)
    config["name"] = name or config.get("name") or ask("NAME", "Stream Name")
    _prompt_missing(config, defaults)
    answer = await session.api(f"STREAM.CREATE.{config['name']}", config)
    await show_stream_info(session, answer, created=True)


@stream.command("ls")
@click.option("-n", "--names", is_flag=True, help="print only the names")
@client_command
async def stream_ls(session: Session, names: bool) -> None:
    """List the streams."""
    if names:
        found = await session.pages("STREAM.NAMES", "streams")
        if session.out.as_json:
            return session.out.json(found)
        for stream_name in found:
            click.echo(stream_name)
        return
    infos = await session.pages("STREAM.LIST", "streams")
    if session.out.as_json:
        return session.out.json(infos)
    if not infos:
        click.echo("No Streams defined")
        return
    rows = [(i["config"]["name"], i["config"].get("description") or "", i.get("created", ""),
             i["state"]["messages"], i["state"]["bytes"], i["state"].get("last_ts", "")) for i in infos]
    session.out.table("Streams", ("Name", "Description", "Created", "Messages", "Size", "Last Message"), rows)


@stream.command("info")
@click.argument("name")
@client_command
async def stream_info(session: Session, name: str) -> None:
    """Show stream NAME's configuration, cluster and state."""
    await show_stream_info(session, await session.api(f"STREAM.INFO.{name}"))


async def show_stream_info(session: Session, info: dict[str, Any], created: bool = False) -> None:
    out = session.out
    if out.as_json:
        return out.json(info)
    config, state = info["config"], info["state"]
    out.line(f"{'Stream' if not created else 'Created stream'} {config['name']}"
             + (f" created {info['created']}" if info.get("created") else ""), style="bold green")
    click.echo()
    out.fields("Configuration", [
        ("Subjects", ", ".join(config.get("subjects") or [])), ("Replicas", config.get("num_replicas", 1)),
        ("Storage", config.get("storage")), ("Retention", config.get("retention")),
        ("Discard Policy", config.get("discard")), ("Duplicate Window", format_duration_ns(config.get("duplicate_window", 0))),
        ("Maximum Messages", config.get("max_msgs")), ("Maximum Per Subject", config.get("max_msgs_per_subject")),
        ("Maximum Bytes", config.get("max_bytes")), ("Maximum Age", format_duration_ns(config.get("max_age", 0))),
        ("Maximum Message Size", config.get("max_msg_size")), ("Allows Rollups", config.get("allow_rollup_hdrs", False)),
        ("Deny Deletes", config.get("deny_delete", False)), ("Deny Purges", config.get("deny_purge", False))])
    cluster = info.get("cluster") or {}
    if cluster:
        replicas = ", ".join(f"{r['name']}{' (current)' if r.get('current') else ''}" for r in cluster.get("replicas") or [])
        out.fields("Cluster Information", [("Name", cluster.get("name", "")), ("Leader", cluster.get("leader", "")),
                                           ("Replicas", replicas)])
    out.fields("State", [("Messages", state["messages"]), ("Bytes", state["bytes"]),
                         ("First Sequence", f"{state['first_seq']} @ {state.get('first_ts', '')}"),
                         ("Last Sequence", f"{state['last_seq']} @ {state.get('last_ts', '')}"),
                         ("Deleted Messages", state.get("num_deleted", 0)),
                         ("Active Consumers", state.get("consumer_count", 0)),
                         ("Number of Subjects", state.get("num_subjects", 0))])


@stream.command("edit")
@click.argument("name")
@_config_options
@click.option("-f", "--force", is_flag=True, help="change without asking")
@client_command
async def stream_edit(session: Session, name: str, force: bool, **flags: Any) -> None:
    """Change stream NAME's config (only the options given)."""
    current = (await session.api(f"STREAM.INFO.{name}"))["config"]
    config = apply_flags(current, flags)
    changed = sorted(key for key in set(config) | set(current) if config.get(key) != current.get(key))
    if not changed:
        raise click.UsageError("no change requested (give at least one config option)")
    confirm(f"Really edit stream {name} ({', '.join(changed)})?", force)
    await show_stream_info(session, await session.api(f"STREAM.UPDATE.{name}", config))


@stream.command("cp")
@click.argument("source")
@click.argument("destination")
@_config_options
@client_command
async def stream_cp(session: Session, source: str, destination: str, **flags: Any) -> None:
    """Create stream DESTINATION with SOURCE's config (and any options given; usually --subjects)."""
    config = apply_flags((await session.api(f"STREAM.INFO.{source}"))["config"], flags)
    config["name"] = destination
    config.pop("metadata", None)  # the server's stamps (_nats.*) are the new stream's own to set
    await show_stream_info(session, await session.api(f"STREAM.CREATE.{destination}", config), created=True)


@stream.command("rm")
@click.argument("name")
@click.option("-f", "--force", is_flag=True, help="delete without asking")
@client_command
async def stream_rm(session: Session, name: str, force: bool) -> None:
    """Delete stream NAME and every message in it."""
    confirm(f"Really delete stream {name}?", force)
    answer = await session.api(f"STREAM.DELETE.{name}")
    session.out.json(answer) if session.out.as_json else click.echo(f"Deleted stream {name}")


@stream.command("purge")
@click.argument("name")
@click.option("--subject", help="purge only messages on this subject (wildcards allowed)")
@click.option("--seq", type=int, help="purge messages below this sequence")
@click.option("--keep", type=int, help="keep this many of the newest messages")
@click.option("-f", "--force", is_flag=True, help="purge without asking")
@client_command
async def stream_purge(session: Session, name: str, subject: str | None, seq: int | None, keep: int | None,
                       force: bool) -> None:
    """Remove messages from stream NAME (all, or by --subject/--seq/--keep)."""
    if seq is not None and keep is not None:
        raise click.UsageError("--seq and --keep cannot be combined")
    confirm(f"Really purge stream {name}?", force)
    body = {key: value for key, value in (("filter", subject), ("seq", seq), ("keep", keep)) if value is not None}
    answer = await session.api(f"STREAM.PURGE.{name}", body)
    if session.out.as_json:
        return session.out.json(answer)
    click.echo(f"Purged {answer.get('purged', 0)} messages from {name}")


@stream.command("get")
@click.argument("name")
@click.argument("seq", type=int, required=False)
@click.option("--last-for", metavar="SUBJECT", help="the last message on this subject instead of SEQ")
@client_command
async def stream_get(session: Session, name: str, seq: int | None, last_for: str | None) -> None:
    """Print message SEQ of stream NAME (or the last one on --last-for SUBJECT)."""
    if seq is not None and last_for is not None:
        raise click.UsageError("give SEQ or --last-for, not both")
    if seq is None and last_for is None:
        seq = int(ask("SEQ", "Message Sequence to retrieve", kind=int))
    body = {"seq": seq} if seq is not None else {"last_by_subj": last_for}
    answer = await session.api(f"STREAM.MSG.GET.{name}", body)
    if session.out.as_json:
        return session.out.json(answer)
    message = answer["message"]
    click.echo(f"Item: {name}#{message['seq']} received {message.get('time', '')} on Subject {message['subject']}")
    if message.get("hdrs"):
        click.echo()
        click.echo("Headers: " + base64.b64decode(message["hdrs"]).decode(errors="replace").strip())
    click.echo()
    click.echo(base64.b64decode(message.get("data") or b"").decode(errors="replace"))


@stream.command("rmm")
@click.argument("name")
@click.argument("seq", type=int, required=False)
@click.option("-f", "--force", is_flag=True, help="delete without asking")
@client_command
async def stream_rmm(session: Session, name: str, seq: int | None, force: bool) -> None:
    """Securely remove message SEQ from stream NAME."""
    if seq is None:
        seq = int(ask("SEQ", "Message Sequence to remove", kind=int))
    confirm(f"Really remove message {seq} from stream {name}?", force)
    answer = await session.api(f"STREAM.MSG.DELETE.{name}", {"seq": seq})
    session.out.json(answer) if session.out.as_json else click.echo(f"Deleted message {seq} from {name}")
