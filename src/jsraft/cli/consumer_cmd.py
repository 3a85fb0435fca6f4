"""`jsraft consumer …`: consumer administration with the `nats` CLI's verbs, flags and defaults (layer L6).

Owns: `consumer add` (pull with `--pull`, push with `--target SUBJECT`, `--sample`, `--ephemeral`,
`--config FILE.json`, prompts on a terminal for what is missing), `ls`, `info`, `next` (acks what it
prints unless `--no-ack`), `rm` and `report`.

Invariants:
  1. `next` acknowledges a message only after printing it, and with `--no-ack` never: the message is then
     redelivered after the consumer's ack wait, as with `nats con next --no-ack`.
  2. An ephemeral consumer is created without a durable name (the server names it); a named one is durable.

Imports: stdlib, click, L4 (`client` pull subscriptions), cli siblings. Reference: natscli
`cli/consumer_command.go`.
"""

from __future__ import annotations

import datetime
import json
from typing import Any

import click

from jsraft.cli.session import (
    Session, ask, client_command, confirm, format_duration_ns, is_terminal, parse_duration_ns,
)
from jsraft.client import JetStreamContext, RequestTimeout

DELIVER = ("all", "last", "new", "last_per_subject")
ACK = click.Choice(["none", "all", "explicit"])


def _deliver(value: str, config: dict[str, Any]) -> None:
    """natscli's `--deliver`: all, last, new, last_per_subject (or `subject`), a sequence, or a duration ago."""
    if value in DELIVER or value == "subject":
        config["deliver_policy"] = "last_per_subject" if value == "subject" else value
    elif value.isdigit():
        config.update(deliver_policy="by_start_sequence", opt_start_seq=int(value))
    else:
        start = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(
            microseconds=parse_duration_ns(value) // 1000)
        config.update(deliver_policy="by_start_time", opt_start_time=start.isoformat().replace("+00:00", "Z"))


def build_config(name: str | None, flags: dict[str, Any]) -> dict[str, Any]:
    config: dict[str, Any] = {}
    if flags.get("config_file"):
        with open(flags["config_file"]) as handle:
            try:
                config = json.load(handle)
            except ValueError as error:
                raise click.BadParameter(f"{flags['config_file']}: not JSON: {error}") from None
    if name:
        config.update(durable_name=name, name=name)
    if flags.get("target"):
        config["deliver_subject"] = flags["target"]
    for flag, field in (("ack", "ack_policy"), ("replay", "replay_policy"), ("filter", "filter_subject"),
                        ("max_deliver", "max_deliver"), ("max_pending", "max_ack_pending"),
                        ("deliver_group", "deliver_group"), ("description", "description")):
        if flags.get(flag) is not None:
            config[field] = flags[flag]
    if flags.get("sample") is not None:
        config["sample_freq"] = f"{flags['sample']}%"
    if flags.get("deliver") is not None:
        _deliver(flags["deliver"], config)
    for flag, field in (("wait", "ack_wait"), ("heartbeat", "idle_heartbeat"),
                        ("inactive_threshold", "inactive_threshold")):
        if flags.get(flag) is not None:
            config[field] = parse_duration_ns(flags[flag])
    if flags.get("flow_control"):
        config["flow_control"] = True
    if flags.get("headers_only"):
        config["headers_only"] = True
    return config


def _prompt_missing(config: dict[str, Any], flags: dict[str, Any]) -> None:
    """What `nats con add` asks for; without a terminal, pull-or-push must be given (a --config file
    without a deliver subject is a pull consumer)."""
    if not flags["pull"] and not flags.get("config_file") and "deliver_subject" not in config:
        target = ask("--pull or --target", "Delivery target (empty for Pull Consumers)", default="")
        if target:
            config["deliver_subject"] = target
    if flags["defaults"] or not is_terminal():
        return
    if "deliver_policy" not in config:
        _deliver(click.prompt("Start policy (all, new, last, subject, 1h, msg sequence)", default="all"), config)
    if "ack_policy" not in config:
        config["ack_policy"] = click.prompt("Acknowledgment policy", default="explicit", type=ACK)
    if "deliver_subject" in config and "replay_policy" not in config:
        config["replay_policy"] = click.prompt("Replay policy", default="instant",
                                               type=click.Choice(["instant", "original"]))
    if "filter_subject" not in config:
        config["filter_subject"] = click.prompt("Filter Stream by subject (blank for all)", default="") or None
        if config["filter_subject"] is None:
            del config["filter_subject"]
    if "max_deliver" not in config:
        config["max_deliver"] = click.prompt("Maximum Allowed Deliveries", default=-1, type=int)


@click.group("consumer")
def consumer() -> None:
    """Consumer administration (the `nats consumer` verbs)."""


@consumer.command("add")
@click.argument("stream")
@click.argument("name", required=False)
@click.option("--pull", is_flag=True, help="a pull consumer")
@click.option("--target", metavar="SUBJECT", help="push consumer: deliver messages to this subject")
@click.option("--deliver", help="start policy: all, new, last, subject, a sequence, or a duration ago (1h)")
@click.option("--ack", type=ACK, help="acknowledgement policy (default explicit)")
@click.option("--replay", type=click.Choice(["instant", "original"]), help="replay policy (push)")
@click.option("--filter", help="only deliver messages on this subject")
@click.option("--max-deliver", type=int, help="how often a message may be delivered (-1 unlimited)")
@click.option("--max-pending", type=int, help="maximum unacknowledged messages")
@click.option("--wait", help="ack wait before redelivery, e.g. 30s")
@click.option("--sample", type=click.IntRange(0, 100), help="percentage of acks to sample as metrics")
@click.option("--heartbeat", help="idle heartbeat interval (push), e.g. 5s")
@click.option("--flow-control", is_flag=True, help="push flow control")
@click.option("--headers-only", is_flag=True, help="deliver headers and no payload")
@click.option("--deliver-group", help="push: deliver to this queue group")
@click.option("--inactive-threshold", help="remove an ephemeral consumer idle this long")
@click.option("--description", help="a description of the consumer")
@click.option("--ephemeral", is_flag=True, help="an ephemeral consumer (no name; removed when idle)")
@click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False),
              help="a JSON file with the whole consumer config (flags override it)")
@click.option("--defaults", is_flag=True, help="use defaults for every value not given (no prompts)")
@client_command
async def consumer_add(session: Session, stream: str, name: str | None, **flags: Any) -> None:
    """Create consumer NAME on STREAM (durable; --ephemeral for none), pull (--pull) or push (--target)."""
    config = build_config(name, flags)
    if not flags["ephemeral"] and not config.get("durable_name"):
        given = ask("NAME (or --ephemeral)", "Consumer name")
        config.update(durable_name=given, name=given)
    _prompt_missing(config, flags)
    config.setdefault("ack_policy", "explicit")
    consumer_name = config.get("name") or config.get("durable_name")
    tail = f"CONSUMER.CREATE.{stream}" + (f".{consumer_name}" if consumer_name else "")
    answer = await session.api(tail, {"stream_name": stream, "config": config})
    show_consumer_info(session, answer)


@consumer.command("ls")
@click.argument("stream")
@client_command
async def consumer_ls(session: Session, stream: str) -> None:
    """List STREAM's consumers."""
    infos = await session.pages(f"CONSUMER.LIST.{stream}", "consumers")
    if session.out.as_json:
        return session.out.json(infos)
    if not infos:
        click.echo(f"No Consumers defined for {stream}")
        return
    rows = [(i["name"], i["config"].get("description") or "", i.get("created", ""), i["num_ack_pending"],
             i["num_pending"], i["delivered"].get("last_active") or "never") for i in infos]
    session.out.table(f"Consumers of {stream}", ("Name", "Description", "Created", "Ack Pending", "Unprocessed",
                                                 "Last Delivery"), rows)


@consumer.command("info")
@click.argument("stream")
@click.argument("name")
@client_command
async def consumer_info(session: Session, stream: str, name: str) -> None:
    """Show consumer NAME of STREAM: its config and state."""
    show_consumer_info(session, await session.api(f"CONSUMER.INFO.{stream}.{name}"))


def show_consumer_info(session: Session, info: dict[str, Any]) -> None:
    out = session.out
    if out.as_json:
        return out.json(info)
    config = info["config"]
    out.line(f"Information for Consumer {info['stream_name']} > {info['name']} created {info.get('created', '')}",
             style="bold green")
    click.echo()
    pairs = [("Name", info["name"]), ("Durable", config.get("durable_name") or "(ephemeral)"),
             ("Delivery Subject" if config.get("deliver_subject") else "Pull Mode",
              config.get("deliver_subject") or "true"),
             ("Filter Subject", config.get("filter_subject") or ", ".join(config.get("filter_subjects") or []) or "(all)"),
             ("Deliver Policy", config.get("deliver_policy")), ("Ack Policy", config.get("ack_policy")),
             ("Ack Wait", format_duration_ns(config.get("ack_wait", 0))), ("Replay Policy", config.get("replay_policy")),
             ("Maximum Deliveries", config.get("max_deliver")), ("Max Ack Pending", config.get("max_ack_pending"))]
    if config.get("sample_freq"):
        pairs.append(("Sampling Rate", config["sample_freq"]))
    out.fields("Configuration", pairs)
    delivered, floor = info["delivered"], info["ack_floor"]
    out.fields("State", [
        ("Last Delivered Message", f"Consumer sequence: {delivered['consumer_seq']} Stream sequence: {delivered['stream_seq']}"),
        ("Acknowledgment Floor", f"Consumer sequence: {floor['consumer_seq']} Stream sequence: {floor['stream_seq']}"),
        ("Outstanding Acks", info["num_ack_pending"]), ("Redelivered Messages", info["num_redelivered"]),
        ("Unprocessed Messages", info["num_pending"]), ("Waiting Pulls", info.get("num_waiting", 0))])


@consumer.command("next")
@click.argument("stream")
@click.argument("name")
@click.option("--count", type=int, default=1, show_default=True, help="how many messages to get")
@click.option("--ack/--no-ack", default=True, help="acknowledge each message received (default) or not")
@click.option("--raw", is_flag=True, help="print only the payloads")
@client_command
async def consumer_next(session: Session, stream: str, name: str, count: int, ack: bool, raw: bool) -> None:
    """Get the next message(s) from pull consumer NAME of STREAM, acknowledging each unless --no-ack."""
    js = JetStreamContext(session.client, timeout=session.timeout_s)
    sub = await js.pull_subscribe_bind(name, stream)
    got = 0
    try:
        while got < count:
            try:
                msgs = await sub.fetch(1, timeout=session.timeout_s)
            except RequestTimeout:
                raise click.ClickException(f"no message from {stream} > {name} within {session.timeout_s:g}s")
            for msg in msgs:
                got += 1
                if raw:
                    click.echo(msg.data.decode(errors="replace"))
                else:
                    meta = msg.metadata
                    click.echo(f"[{datetime.datetime.now():%H:%M:%S}] subj: {msg.subject} / tries: {meta.num_delivered} "
                               f"/ cons seq: {meta.consumer_seq} / str seq: {meta.stream_seq} / pending: {meta.num_pending}")
                    click.echo()
                    click.echo(msg.data.decode(errors="replace"))
                    click.echo()
                if ack:
                    await msg.ack_sync(timeout=session.timeout_s)
                    if not raw:
                        click.echo("Acknowledged message")
                        click.echo()
    finally:
        await sub.unsubscribe()


@consumer.command("rm")
@click.argument("stream")
@click.argument("name")
@click.option("-f", "--force", is_flag=True, help="delete without asking")
@client_command
async def consumer_rm(session: Session, stream: str, name: str, force: bool) -> None:
    """Delete consumer NAME of STREAM."""
    confirm(f"Really delete consumer {stream} > {name}?", force)
    answer = await session.api(f"CONSUMER.DELETE.{stream}.{name}")
    session.out.json(answer) if session.out.as_json else click.echo(f"Deleted consumer {stream} > {name}")


@consumer.command("report")
@click.argument("stream")
@client_command
async def consumer_report(session: Session, stream: str) -> None:
    """A table of STREAM's consumers: mode, acks pending, redelivered, unprocessed, ack floor."""
    infos = await session.pages(f"CONSUMER.LIST.{stream}", "consumers")
    if session.out.as_json:
        return session.out.json(infos)
    rows = [(i["name"], "Push" if i["config"].get("deliver_subject") else "Pull", i["config"].get("ack_policy"),
             format_duration_ns(i["config"].get("ack_wait", 0)), i["num_ack_pending"], i["num_redelivered"],
             i["num_pending"], i["ack_floor"]["stream_seq"], (i.get("cluster") or {}).get("leader", ""))
            for i in infos]
    session.out.table(f"Consumer report for {stream} with {len(infos)} consumers",
                      ("Consumer", "Mode", "Ack Policy", "Ack Wait", "Ack Pending", "Redelivered", "Unprocessed",
                       "Ack Floor", "Cluster"), rows)
