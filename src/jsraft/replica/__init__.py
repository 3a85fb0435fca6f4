"""Replica (layer L3½): the deterministic node side of a Raft group, driven by the runtime and the simulator.

Public surface: `GroupCycle` (one group's synchronous Ready cycle: take → persist → send → apply →
advance, written once), `Work` and the persistence steps `write_work` / `sync_work` with their order,
`prepare` / `restored_state` (how a replica starts from what its WAL recovered), and the `StateMachine`
contract; and a stream replica's repair decisions (`stream_repair`: which job next, the catch-up session,
the leader's answer to a catch-up request), when a replica may lead its stream (`stream_leading`) and
when it still wants an audit after a recovery or a repair (`audit_wish`), which production's stream replica,
repair worker and audit runner and the simulator all run. Modules: `cycle`, `persist`, `restore`,
`state_machine`, `stream_leading`, `stream_repair`, `audit_wish`; and the node-side glue between Raft
entries and the state machines, trio-free (moved out of `server/`, issue #13): `stream_adapter` (a stream
group's entries applied to its `StreamStateMachine` and consumers), `snapshot_pace` (its snapshots bounded
by messages and bytes applied), `install_mark` (a leader's
snapshot not yet repaired to, noted durably beside the store), `judgement` (whether a replica's store awaits
an audit's confirmation, durably), `consumer_replica` (the consumers
replicated in a stream's log), `publish_pipeline` (publishes decided, batched and answered in order), `republish` (a stream's
`republish`: stored messages published again by their leader),
`meta_adapter` (meta entries applied to `MetaStateMachine`), `advisories` (`AdvisoryLog`), `stream_events`
(the event and advisory shapes a stream group publishes), `consumer_pull` / `consumer_push` (a consumer
led: pull requests and push delivery, as ops and sends), `consumer_events` (consumer advisories and ack
metrics).

Why a layer of its own: every safety claim the simulator makes must be about the code that ships. The
production runtime (`jsraft.runtime`, trio: fsync worker threads, timers, proposal intake) and the
simulator (`jsraft.testing.sim`: `SimDisk`, a simulated network, a seeded clock) both drive these same
objects; neither has a Ready loop of its own.

Imports: L0–L3 (`errors`, `raft`, `disk`, `wal`, ...), attrs. Never trio, `runtime`, `transport` or
`server`; nothing here blocks on anything but the `Disk` it is given.
"""

from jsraft.replica.cycle import GroupCycle, SendFn
from jsraft.replica.persist import GROUP_MARKER, Work, marker_contents, sync_work, write_work
from jsraft.replica.restore import prepare, restored_state
from jsraft.replica.state_machine import StateMachine

__all__ = [
    "GROUP_MARKER", "GroupCycle", "SendFn", "StateMachine", "Work", "marker_contents", "prepare",
    "restored_state", "sync_work", "write_work",
]
