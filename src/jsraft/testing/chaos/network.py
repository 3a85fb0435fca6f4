"""`make_network(kind, nodes)`: a started network-fault implementation for the chaos harness — the
userspace TCP relay (`chaos.relay.Relay`, "relay") or nft drop rules in a private network namespace
(`chaos.netns.NftPartitioner`, "nft"), both `chaos.net.LinkControl`s.

Owns: only the choice. It lives apart from `chaos.net` because both implementations import that module
(`LinkControl`, `Link`, `FaultsLog`): the factory there made an import cycle of three files.

Imports: stdlib, `chaos.net`, `chaos.relay`, `chaos.netns` (test code; production never imports this).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from jsraft.testing.chaos.net import FaultsLog, LinkControl


def make_network(kind: str, nodes: Sequence[str], *, faults_log: FaultsLog | None = None,
                 addresses: dict[str, str] | None = None, **options: Any) -> LinkControl:
    """A started network of `kind` "relay" or "nft" for `nodes`. For "nft", `addresses` maps each node to
    its own loopback address (default 127.0.0.11, .12, ... in node order) and the caller must already run
    in a private network namespace (`chaos.netns.reexec_in_netns`)."""
    if kind == "relay":
        from jsraft.testing.chaos.relay import Relay
        relay = Relay(nodes, faults_log=faults_log, **options)
        relay.start()
        return relay
    if kind == "nft":
        from jsraft.testing.chaos.netns import NftPartitioner, default_addresses
        return NftPartitioner(addresses or default_addresses(nodes), faults_log=faults_log, **options)
    raise ValueError(f"unknown network kind {kind!r} (relay or nft)")
