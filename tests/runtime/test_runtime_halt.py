"""A broken safety rule in one group halts that group only (issue #14).

Method: one real `NodeRuntime` (the harness's single-node cluster, SimDisk-backed WALs, autojump clock)
with two groups, each led by n1 with committed entries. A crafted AppendEntries of a higher term, whose
entry at index 1 conflicts with the committed log, is delivered to one group: its core's rule 5 raises an
`InvariantViolation`. That group must be closed with the halted reason (what `/jsz` and the metrics show
as closed) and an error log line naming it; its proposals fail with `GroupHalted`; the runtime keeps
running and the other group still commits. Before the change the violation ended the runtime's loop.
"""

from __future__ import annotations

import logging

import pytest
import trio

from runtime_harness import GROUP, Cluster, ListMachine

from jsraft.raft import AppendEntries, Entry, EntryType
from jsraft.runtime import GroupClosed
from jsraft.runtime.group import HALTED_PREFIX


async def test_a_broken_committed_entry_rule_halts_only_its_group(autojump_clock, caplog):
    caplog.set_level(logging.ERROR, logger="jsraft.runtime.group")
    async with trio.open_nursery() as nursery:
        cluster = Cluster(nursery, size=1)
        runtime = await cluster.start("n1")
        other = ListMachine()
        await runtime.open_group("other", voters=["n1"], state_machine=other)
        for group in (GROUP, "other"):
            await cluster.wait_leader(group)
            await runtime.propose(group, b"committed")
        raft = runtime.status(GROUP).raft
        assert raft.commit_index >= 2
        bad = AppendEntries(from_id="n2", to_id="n1", term=raft.current_term + 5, leader_id="n2",
                            prev_log_index=0, prev_log_term=0, leader_commit=0,
                            entries=(Entry(index=1, term=raft.current_term + 5, type=EntryType.NORMAL,
                                           data=b"rewrite"),))
        runtime.deliver(GROUP, bad)
        reason = runtime.status(GROUP).closed_reason or ""
        assert reason.startswith(HALTED_PREFIX) and "rule 5" in reason, reason
        assert any(GROUP in r.getMessage() and "halted" in r.getMessage() for r in caplog.records)
        with pytest.raises(GroupClosed):
            await runtime.propose(GROUP, b"after")
        assert (await runtime.propose("other", b"still serving"))[1] == b"still serving"  # type: ignore[index]
        assert runtime.status("other").closed_reason is None
        await cluster.stop_all()
        nursery.cancel_scope.cancel()
