"""Runtime (layer L4): the trio driver for many Raft groups on one node.

Public surface: `NodeRuntime` (open groups, deliver messages, propose, run), the `StateMachine` protocol
a group applies to, the clocks (`Clock`, `SystemClock`, `SkewableClock`, `SteadyWall`), `GroupStatus`, and the
runtime's errors. Modules: `node_runtime` (the ticker, the ready loop and group commit), `group` (one
group's inputs and the trio half of a cycle), `persist` (the worker-thread half), `proposals`
(backpressure and waiters), `restore` (start-up decisions), `state_machine`, `clock`, `errors`.

Imports: L0–L3 and trio. Never `transport`: the transport calls `NodeRuntime.deliver` and is called
through the `send` function the runtime is given.
"""

from jsraft.runtime.clock import Clock, SkewableClock, SteadyWall, SystemClock
from jsraft.runtime.errors import GroupClosed, GroupError, GroupExists, GroupNotFound, OutcomeUnknown
from jsraft.runtime.group import GroupStatus, SendFn
from jsraft.runtime.node_runtime import NodeRuntime
from jsraft.runtime.state_machine import StateMachine

__all__ = [
    "Clock", "GroupClosed", "GroupError", "GroupExists", "GroupNotFound", "GroupStatus", "NodeRuntime",
    "OutcomeUnknown", "SendFn", "SkewableClock", "StateMachine", "SteadyWall", "SystemClock",
]
