"""Runtime (layer L4): the trio driver for many Raft groups on one node.

The thin trio shell around `jsraft.replica`: the Ready cycle, its persistence order, the start-up
decisions and the `StateMachine` contract live there (shared with the simulator); this package adds the
ticker, worker threads for the fsyncs, proposal intake with backpressure, and the group table.

Public surface: `NodeRuntime` (open groups, deliver messages, propose, run), the `StateMachine` protocol
a group applies to (re-exported from `replica`), the clocks (`Clock`, `SystemClock`, `SkewableClock`,
`SteadyWall`), `GroupStatus`, and the runtime's errors. Modules: `node_runtime` (the ticker, the ready
loop and group commit), `group` (one group's inputs, busy while its cycle is in flight), `persist` (the
worker-thread batching of a cycle's disk half), `proposals` (backpressure and waiters), `group_record` (the groups this storage started: a lost group
directory never bootstraps again), `progress` (wakes waiters after every cycle), `ticker` (the one tick
pass over the awake groups), `quiesce` (idle groups stop ticking; the per-peer node beat and liveness),
`workers` (the persistent fsync threads the cycles' disk half runs on), `locks` (`FastLock`: a free
acquire that is not a scheduling point), `gc_freeze` (a `jsraft serve` process's full collections freeze
what survived them), `clock`, `errors`.

Imports: L0–L3½ and trio. Never `transport`: the transport calls `NodeRuntime.deliver` and is called
through the `send` function the runtime is given.
"""

from jsraft.runtime.clock import Clock, SkewableClock, SteadyWall, SystemClock
from jsraft.runtime.errors import GroupClosed, GroupError, GroupExists, GroupHalted, GroupNotFound, OutcomeUnknown
from jsraft.replica.cycle import SendFn
from jsraft.replica.state_machine import StateMachine
from jsraft.runtime.group import GroupStatus
from jsraft.runtime.node_runtime import NodeRuntime

__all__ = [
    "Clock", "GroupClosed", "GroupError", "GroupExists", "GroupHalted", "GroupNotFound", "GroupStatus",
    "NodeRuntime", "OutcomeUnknown", "SendFn", "SkewableClock", "StateMachine", "SteadyWall", "SystemClock",
]
