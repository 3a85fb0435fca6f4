"""The embedded `add_consumer` (issue #6, bug 6): an unnamed ephemeral gets a generated name, but its
stored config keeps no `name`, as nats-server's does (observed on nats-server 2.15.1 through nats-py:
`add_consumer("E", ConsumerConfig(ack_policy="explicit"))` answers `name` "8CpWFMvU", `config.name`
None) and as jsraft's JetStream API path already stored it.

Method: one node from `jsraft.open_node` (client port 0, real files), its in-process JetStream context;
the answer of `add_consumer` and the raw config in the replicated consumer set are checked. Before the fix
the embedded path stored the generated name in the config.
"""

from __future__ import annotations

import json

import jsraft
from jsraft.server.settings.config import NodeConfig


async def test_an_unnamed_ephemeral_keeps_no_name_in_its_config(tmp_path):
    config = NodeConfig(name="n1", store_dir=str(tmp_path / "n1"), cluster_port=0, client_port=0, tick_ms=20,
                        election_ticks=5, test_mode=True)
    async with jsraft.open_node(config) as node:
        js = node.jetstream()
        await js.add_stream(name="S", subjects=["s.>"])
        info = await js.add_consumer("S", ack_policy="explicit")
        named = await js.add_consumer("S", name="N", ack_policy="explicit")
        entries = node.streams.replicas["S"].adapter.consumers.entries
        assert info.name and info.name in entries and info.config.name is None
        assert "name" not in json.loads(entries[info.name].raw_config)
        assert named.name == "N" and json.loads(entries["N"].raw_config)["name"] == "N"
