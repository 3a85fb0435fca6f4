"""`jsraft stream backup|restore` and `jsraft backup|restore`: streams (messages, consumers' configs and
state) to a directory and back, through `$JS.API.STREAM.SNAPSHOT` / `RESTORE` (layer L6).

Owns: the backup directory — `backup.json` (the stream's config and state as the snapshot answered them,
and the size and CRC32C of every chunk received) and `stream.snap` (the chunks' bytes, in order) — and
for an account backup one such directory per stream; the progress bar (on a terminal, unless
`--no-progress`).

Invariants:
  1. A backup is reported done only after every chunk was received and acknowledged, the end marker came
     without an error, and the whole snapshot verified here (`SnapshotReader`: every frame and record
     checksum, and the end tuple equal to the messages').
  2. A restore checks every chunk against the CRC32C recorded for it before sending anything: a damaged
     backup is refused with the chunk named, and nothing is restored. The server verifies again.
  3. A restore is reported done only when the server answered with the stream's info (it verified the
     restored stream's state tuple against the snapshot's before answering).

Imports: stdlib, click, crc32c, rich, L4 (`client`), L5 (`server.snapshot_format`), cli siblings.
Reference: natscli `cli/stream_command.go` (backup, restore), `cli/account_command.go` (backup, restore).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click
from crc32c import crc32c
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

from jsraft.cli.session import ApiFailure, Failed, Session, client_command
from jsraft.client.inbox import new_inbox_prefix
from jsraft.server.api.snapshot_format import SnapshotReader

MANIFEST, DATA = "backup.json", "stream.snap"
CHUNK_BYTES = 128 * 1024
RESTORE_TIMEOUT_S = 600.0


@contextmanager
def progress_bar(enabled: bool, description: str, total: int | None) -> Iterator[Any]:
    """A rich progress bar on stderr when `enabled` and stderr is a terminal; else a no-op advance."""
    console = Console(stderr=True)
    if not enabled or not console.is_terminal:
        yield lambda advance: None
        return
    with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                  console=console, transient=False) as progress:
        task = progress.add_task(description, total=total)
        yield lambda advance: progress.update(task, advance=advance)
        progress.update(task, total=progress.tasks[0].completed)


def _progress_option(function: Any) -> Any:
    return click.option("--progress/--no-progress", default=True,
                        help="show a progress bar on a terminal (default) or never")(function)


async def backup_stream(session: Session, name: str, directory: str, progress: bool, consumers: bool) -> dict[str, Any]:
    """Invariant 1."""
    os.makedirs(directory, exist_ok=True)
    deliver = new_inbox_prefix() + ".snapshot"
    sub = await session.client.subscribe(deliver)
    answer = await session.api(f"STREAM.SNAPSHOT.{name}", {"deliver_subject": deliver, "chunk_size": CHUNK_BYTES,
                                                           "no_consumers": not consumers})
    chunks: list[dict[str, int]] = []
    reader = SnapshotReader()
    path = os.path.join(directory, DATA)
    try:
        with open(path, "wb") as data, progress_bar(progress, f"Backing up {name}", answer["state"]["bytes"]) as advance:
            while True:
                msg = await sub.next_msg(timeout=max(session.timeout_s, 30.0))
                if not msg.data and not msg.reply:
                    if msg.status is not None and msg.status >= 400:
                        first_line = (msg.headers_raw or b"").split(b"\r\n", 1)[0].decode(errors="replace")
                        raise Failed(f"backup of {name} failed: {first_line.split(' ', 2)[-1]}")
                    break
                data.write(msg.data)
                reader.feed(msg.data)
                for _ in reader.messages():
                    pass
                chunks.append({"size": len(msg.data), "crc32c": crc32c(msg.data)})
                advance(len(msg.data))
                if msg.reply:
                    await session.client.publish(msg.reply, b"")
            data.flush()
            os.fsync(data.fileno())
    finally:
        await sub.unsubscribe()
    end = reader.finish()
    manifest = {"format": "jsraft-snapshot-1", "stream": name, "config": answer["config"], "state": answer["state"],
                "end": end, "chunks": chunks, "bytes": sum(c["size"] for c in chunks)}
    with open(os.path.join(directory, MANIFEST), "w") as handle:
        json.dump(manifest, handle, indent=2)
    return manifest


def read_backup(directory: str) -> tuple[dict[str, Any], list[bytes]]:
    """The manifest and every chunk, each checked against its recorded CRC32C (invariant 2)."""
    try:
        with open(os.path.join(directory, MANIFEST)) as handle:
            manifest = json.load(handle)
    except (OSError, ValueError) as error:
        raise Failed(f"{directory}: not a jsraft backup ({MANIFEST}: {error})") from None
    chunks = []
    with open(os.path.join(directory, DATA), "rb") as data:
        offset = 0
        for number, chunk in enumerate(manifest["chunks"], 1):
            body = data.read(chunk["size"])
            if len(body) != chunk["size"] or crc32c(body) != chunk["crc32c"]:
                raise Failed(f"backup chunk {number} (bytes {offset}..{offset + chunk['size'] - 1} of "
                             f"{os.path.join(directory, DATA)}) fails its checksum: the backup is damaged; "
                             "nothing restored")
            chunks.append(body)
            offset += len(body)
        if data.read(1):
            raise Failed(f"{os.path.join(directory, DATA)} is longer than its manifest says: nothing restored")
    return manifest, chunks


async def restore_stream(session: Session, directory: str, progress: bool) -> dict[str, Any]:
    """Invariants 2 and 3."""
    manifest, chunks = read_backup(directory)
    name = manifest["config"]["name"]
    answer = await session.api(f"STREAM.RESTORE.{name}", {"config": manifest["config"], "state": manifest["state"]})
    deliver = answer["deliver_subject"]
    with progress_bar(progress, f"Restoring {name}", manifest["bytes"]) as advance:
        for chunk in chunks:
            ack = await session.client.request(deliver, chunk, timeout=max(session.timeout_s, 30.0))
            if ack.data:
                _raise_answer(ack.data)
            advance(len(chunk))
    final = await session.client.request(deliver, b"", timeout=RESTORE_TIMEOUT_S)
    return _raise_answer(final.data)


def _raise_answer(data: bytes) -> dict[str, Any]:
    try:
        answer = json.loads(data)
    except ValueError:
        raise Failed(f"restore: unexpected answer {data[:200]!r}") from None
    if "error" in answer:
        raise ApiFailure(answer["error"])
    return answer


def _state_line(state: dict[str, Any]) -> str:
    return (f"first_seq={state['first_seq']} last_seq={state['last_seq']} messages={state['messages']} "
            f"bytes={state['bytes']}")


@click.command("backup")
@click.argument("stream")
@click.argument("directory", metavar="DIR")
@_progress_option
@click.option("--consumers/--no-consumers", default=True, help="include the consumers' configs and state (default)")
@client_command
async def stream_backup(session: Session, stream: str, directory: str, progress: bool, consumers: bool) -> None:
    """Back up STREAM's messages (and its consumers' configs and state) into directory DIR."""
    manifest = await backup_stream(session, stream, directory, progress, consumers)
    click.echo(f"Backed up stream {stream} to {directory}: {manifest['bytes']} bytes in {len(manifest['chunks'])} "
               f"chunks; {_state_line(manifest['end'])} digest={manifest['end']['digest']}")


@click.command("restore")
@click.argument("directory", metavar="DIR")
@_progress_option
@client_command
async def stream_restore(session: Session, directory: str, progress: bool) -> None:
    """Restore the stream backed up in DIR (it must not exist); done once the server verified it."""
    info = await restore_stream(session, directory, progress)
    if session.out.as_json:
        return session.out.json(info)
    click.echo(f"Restored stream {info['config']['name']}: {_state_line(info['state'])}")


@click.command("backup")
@click.argument("directory", metavar="DIR")
@_progress_option
@client_command
async def backup(session: Session, directory: str, progress: bool) -> None:
    """Back up every stream (messages, consumers' configs and state) into DIR/<stream>."""
    names = await session.pages("STREAM.NAMES", "streams")
    for name in names:
        manifest = await backup_stream(session, name, os.path.join(directory, name), progress, True)
        click.echo(f"Backed up stream {name}: {_state_line(manifest['end'])}")
    click.echo(f"Backed up {len(names)} streams to {directory}")


@click.command("restore")
@click.argument("directory", metavar="DIR")
@_progress_option
@client_command
async def restore(session: Session, directory: str, progress: bool) -> None:
    """Restore every stream backed up in DIR/<stream> by `jsraft backup DIR` (none may exist yet)."""
    found = sorted(entry for entry in os.listdir(directory) if os.path.isfile(os.path.join(directory, entry, MANIFEST)))
    if not found:
        raise click.UsageError(f"no stream backup under {directory}")
    names = [read_backup(os.path.join(directory, entry))[0]["config"]["name"] for entry in found]
    existing = sorted(set(names) & set(await session.pages("STREAM.NAMES", "streams")))
    if existing:  # every stream is checked (chunks and names) before the first is restored
        raise Failed(f"these streams exist already: {', '.join(existing)}; nothing restored")
    for entry in found:
        info = await restore_stream(session, os.path.join(directory, entry), progress)
        click.echo(f"Restored stream {info['config']['name']}: {_state_line(info['state'])}")
    click.echo(f"Restored {len(found)} streams from {directory}")
