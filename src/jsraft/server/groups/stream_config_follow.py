"""A stream group's config follows the meta assignment by version (stream_replica invariant 5; layer L5).

Owns: `ConfigFollowing`, mixed into `StreamReplica`: while the assignment's `config_index` (the meta log
index that set the replica's `raw` config) is above the state machine's `config_meta_index`, the leader
proposes a CONFIG entry before deciding anything else — so an update survives a leader change between
the meta apply and the proposal, and a new group's first entry fixes its config for every replica's
replay. `StreamReplica` provides `leader`, `machine`, `config_index`, `raw`, `name`, `_propose_lock`,
`_config_task` and `_propose_decided`.

Imports: stdlib, L0.
"""

from __future__ import annotations

import logging
from typing import Any

from jsraft.errors import JsraftError

log = logging.getLogger("jsraft.server.stream")


class ConfigFollowing:
    leader: Any
    machine: Any
    config_index: int
    raw: bytes
    name: str
    _propose_lock: Any
    _config_task: bool
    _propose_decided: Any

    def _config_due(self) -> bool:
        return (self.leader is not None and self.machine is not None
                and self.config_index > self.machine.config_meta_index)

    async def _reconcile_task(self) -> None:
        try:
            await self.reconcile_config_now()
        except JsraftError as error:
            log.warning("stream %s: config %d not proposed yet: %s", self.name, self.config_index, error)
        finally:
            self._config_task = False

    async def reconcile_config_now(self) -> None:
        async with self._propose_lock:
            await self.reconcile_config()

    async def reconcile_config(self) -> None:
        """Under `_propose_lock`: propose the meta assignment's config if the group's is older."""
        leader, machine = self.leader, self.machine
        if leader is None or machine is None or self.config_index <= machine.config_meta_index:
            return
        await self._propose_decided(leader.propose_config(self.raw, self.config_index))
