"""Node identity: `<store_dir>/node.json` — node name, cluster name, storage UUID (layer L5).

Owns: formatting a store directory once (the storage UUID is made then and never again), refusing to
start on a directory that belongs to another node or cluster, and the name a node started without one
takes (`default_node_name`: the one its store directory already holds, else a new nats-server-style id).

Invariants:
  1. `node.json` is written only when absent, atomically through `Disk.write_atomic`; a restart reads it
     and never rewrites it, so the storage UUID proves to peers that this is the same disk (DESIGN §4:
     a changed UUID means lost storage).
  2. A node name or cluster name different from the config → `IdentityMismatch`, nothing touched.
  3. A directory with data but no `node.json` (say, `meta/`) is refused too: formatting it would give old
     data a new identity.

Imports: stdlib, L0, L1 (`disk`), server siblings. Reference: DESIGN.md §3.
"""

from __future__ import annotations

import json
import os
import secrets
import uuid

import attrs

from jsraft.disk.base import Disk
from jsraft.errors import InvalidConfig
from jsraft.server.errors import IdentityMismatch

IDENTITY_FILE = "node.json"
_FORMAT_VERSION = 1


@attrs.frozen(kw_only=True)
class NodeIdentity:
    node_name: str
    cluster_name: str
    storage_uuid: str


def load_or_format(disk: Disk, node_name: str, cluster_name: str, *, rng_uuid: str | None = None) -> NodeIdentity:
    """Read the identity of `disk`, or format it (invariant 1); refuse a foreign one (2, 3)."""
    if not disk.exists(IDENTITY_FILE):
        leftovers = [entry for entry in ("meta", "streams") if disk.exists(entry)]
        if leftovers:
            raise IdentityMismatch(f"store directory holds {', '.join(leftovers)} but no {IDENTITY_FILE}; "
                                   "refusing to format over existing data")
        identity = NodeIdentity(node_name=node_name, cluster_name=cluster_name,
                                storage_uuid=rng_uuid or str(uuid.uuid4()))
        body = {"version": _FORMAT_VERSION, **attrs.asdict(identity)}
        disk.write_atomic(IDENTITY_FILE, json.dumps(body, sort_keys=True).encode())
        return identity
    identity = _parse(disk.read_file(IDENTITY_FILE))
    if identity.node_name != node_name:
        raise IdentityMismatch(f"store directory belongs to node {identity.node_name!r}, not {node_name!r}")
    if identity.cluster_name != cluster_name:
        raise IdentityMismatch(f"store directory belongs to cluster {identity.cluster_name!r}, "
                               f"not {cluster_name!r}")
    return identity


def _parse(data: bytes) -> NodeIdentity:
    try:
        body = json.loads(data)
        if body.get("version") != _FORMAT_VERSION:
            raise InvalidConfig(f"{IDENTITY_FILE}: unknown version {body.get('version')!r}")
        identity = NodeIdentity(node_name=str(body["node_name"]), cluster_name=str(body["cluster_name"]),
                                storage_uuid=str(uuid.UUID(body["storage_uuid"])))
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise IdentityMismatch(f"{IDENTITY_FILE} is unreadable: {error}") from None
    return identity


_ID_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"  # base32, as nats-server's server ids
_ID_CHARS = 56


def default_node_name(store_dir: str) -> str:
    """The name of a node started without one (nats-server needs none): the name `store_dir`'s identity
    file holds, so a restart keeps it, else a new id shaped like nats-server's (`N` + 55 base32 chars).
    Only reads: the directory is formatted later, by `load_or_format`."""
    try:
        with open(os.path.join(store_dir, IDENTITY_FILE), "rb") as file:
            return _parse(file.read()).node_name
    except (FileNotFoundError, IdentityMismatch):
        # An unreadable identity file is refused by `load_or_format` when the node starts, with the reason.
        return "N" + "".join(secrets.choice(_ID_ALPHABET) for _ in range(_ID_CHARS - 1))
