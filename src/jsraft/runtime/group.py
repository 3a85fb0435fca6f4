"""`Group`: one Raft group on this node — its core, WAL, state machine, inbox and proposals (layer L4).

Owns: the trio side of one group: feeding inputs (ticks, messages, proposals, leadership transfers) to
the `RaftNode` — or holding them while a cycle is in flight — and settling proposals. The cycle itself
(take the work, persist, send, apply, advance, own snapshots) is `replica.cycle.GroupCycle`, the same
object the simulator drives; this class only marks the group busy between `take_work` and `finish`, and
`node_runtime` runs the persistence on a worker thread (`persist`).

Invariants:
  1. The `RaftNode` is never stepped, ticked, proposed to or changed by the operator (`accept_data_loss`
     waits) while one of its `Ready`s is being persisted (`busy`). Inputs that arrive meanwhile wait, bounded — messages in an inbox of at most
     `inbox_messages_max`, proposals there too (bounded by their permits), ticks as a capped count, one
     leadership transfer — and are fed right after `advance()`. The one exception is a leader's
     pipelined cycle (`Ready.send_first`): its followers' AppendEntriesResponses of its term are stepped
     at once and what they produce is sent at once (`RaftNode.pipelined_messages`) — they touch only
     progress and the commit index, never the log or the hard state's fenced fields. Why: the core's log bookkeeping
     (`stable_index`, pending truncations) assumes storage has either done a `Ready` or not, never "is
     doing it"; a conflicting AppendEntries stepped mid-write could otherwise ask storage to truncate
     below a commit the same in-flight write is recording.
  2. `send_first_messages` (a leader's, `Ready.send_first`) runs before the work's persistence,
     `send_messages` (everything else) only after it returned (the Ready contract), and `finish` (apply,
     then `advance`, where the leader's own fsynced copy starts to count) only after both (`GroupCycle`
     invariants 2 and 3).
  3. A failed or closed group never touches its core or WAL again; its proposals all settle.
  4. An `InvariantViolation` out of this group's core or cycle (a broken safety rule, e.g. rule 5: a
     committed entry would be removed) halts this group only: it is closed with a reason starting
     `HALTED_PREFIX`, an error log line names it, and `take_work`/`finish` raise `GroupHalted` (which the
     runtime handles as a failed group) instead of the violation, which would end the process and every
     healthy group with it (issue #14). Ticks and messages that hit it return quietly.

Imports: L0, L1 (`raft`, `disk`), L2 (`wal`), L3½ (`replica`), siblings, trio. Reference: etcd-io/raft
`rawnode.go` usage.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import re
from collections.abc import Callable

import attrs
import trio

from jsraft.disk.base import Disk
from jsraft.errors import InvariantViolation, invariant
from jsraft.raft.core import RaftNode
from jsraft.raft.errors import BadConfChange, NotLeader, PeerProtocolError, ProposalDropped, RaftError
from jsraft.raft.membership import ConfChange
from jsraft.raft.messages import AppendEntriesResponse, Message, validate_message
from jsraft.raft.status import Role, Status
from jsraft.replica.cycle import GroupCycle, SendFn
from jsraft.replica.persist import Work
from jsraft.replica.state_machine import StateMachine
from jsraft.runtime.errors import GroupClosed, GroupHalted
from jsraft.runtime.proposals import Proposal, ProposalBook, ProposalState
from jsraft.wal import Wal

log = logging.getLogger(__name__)

# A valid group name, one path component (never "." or ".."). A leading `$` marks the server's reserved
# groups (`$meta`); it is a plain character in a path.
GROUP_NAME = re.compile(r"[$A-Za-z0-9_-][A-Za-z0-9_.-]{0,254}")
HALTED_PREFIX = "halted: safety invariant broken"


@attrs.frozen(kw_only=True)
class GroupStatus:
    """What `NodeRuntime.status()` reports: the core's status plus the runtime's own counters."""

    name: str
    raft: Status
    proposals_in_flight: int  # admitted and not settled (queued, in the log, or abandoned by a caller)
    proposals_in_flight_max: int
    proposals_waiting: int  # in the log, waiting to be applied
    inbox_messages: int
    busy: bool
    closed_reason: str | None


class Group:
    """One group on this node. Built by `NodeRuntime.open_group`; used only from the trio thread."""

    def __init__(self, *, name: str, node: RaftNode, wal: Wal, disk: Disk, state_machine: StateMachine,
                 book: ProposalBook, marker: bytes | None, snapshot_every_entries: int | None,
                 inbox_messages_max: int, on_started: Callable[[int], None] | None = None,
                 on_term: Callable[[int], None] | None = None) -> None:
        self.name = name
        self.book = book
        self.cycle = GroupCycle(name=name, node=node, wal=wal, disk=disk, state_machine=state_machine,
                                marker=marker, snapshot_every_entries=snapshot_every_entries,
                                on_snapshot=book.on_snapshot, on_started=on_started, on_term=on_term,
                                on_applied=lambda entries, results: book.on_applied(entries, results, self._lost))
        self.node = node
        self.wal = wal
        self.disk = disk
        self.state_machine = state_machine
        self.inbox_messages_max = inbox_messages_max
        self.busy = False
        self.idle = trio.Event()  # set whenever the group is not busy (close waits on it)
        self.idle.set()
        self.closing = False  # close_group is waiting for the cycle that holds this group
        self.closed_reason: str | None = None
        self._inbox: collections.deque[Message | Proposal] = collections.deque()
        self._transfer_to: str | None = None  # a leadership transfer asked for while busy (latest wins)
        self._campaign_asked = False  # an election asked for while busy (`campaign`)
        self._inbox_messages = 0
        self._ticks_pending = 0
        self._pipelining: SendFn | None = None  # a leader's cycle is persisting: its send function
        # Ticks kept while busy: enough for an election timeout to pass, bounded all the same.
        self._ticks_pending_max = 2 * node.config.election_ticks

    # --- Inputs ---------------------------------------------------------------------------------

    def stopped(self) -> bool:
        return self.closing or self.closed_reason is not None

    @contextlib.contextmanager
    def _halting(self, *, reraise: bool):
        """Invariant 4: a broken rule in this group's core halts this group, not the process."""
        try:
            yield
        except InvariantViolation as error:
            reason = f"{HALTED_PREFIX}: {error}"
            log.error("group %s halted (the node and its other groups go on): %s", self.name, error)
            self.close(reason)
            if reraise:
                raise GroupHalted(f"raft group {self.name!r} {reason}") from error

    def tick(self) -> None:
        if self.stopped():
            return
        if self.busy:
            self._ticks_pending = min(self._ticks_pending + 1, self._ticks_pending_max)
            return
        with self._halting(reraise=False):
            self.node.tick()

    def deliver(self, message: Message) -> bool:
        """Step `message` now, or queue it while busy. False: dropped (closed, or the inbox is full —
        Raft retransmits). Raises `PeerProtocolError` for a malformed message (the link should drop)."""
        if self.stopped():
            return False
        if not self.busy:
            with self._halting(reraise=False):
                self.node.step(message)
            return not self.stopped()
        # Checked now so the transport learns about a misbehaving peer from this call, not never.
        validate_message(message, self.node.id, self.node.config.snapshot_bytes_max)
        if self._pipelining is not None and self._steps_while_persisting(message):
            # A follower's acknowledgement while our own fsync runs (invariant 1's exception): it may
            # commit on the followers' fsynced copies alone; what it makes us send leaves now.
            with self._halting(reraise=False):
                self.node.step(message)
                for out in self.node.pipelined_messages():
                    self._pipelining(out.to_id, self.name, out)
            return not self.stopped()
        if self._inbox_messages >= self.inbox_messages_max:
            return False
        self._inbox.append(message)
        self._inbox_messages += 1
        return True

    def transfer_leadership(self, to: str) -> None:
        self.check_open()
        if self.node.role is not Role.LEADER:
            raise NotLeader(self.node.leader_id)
        if self.busy:
            self._transfer_to = to
        else:
            self.node.transfer_leadership(to)

    def campaign(self) -> None:
        """Start an election now rather than after an election timeout (the core ignores it where it
        may not: a leader, a repairing replica); while busy, at the end of the cycle."""
        self.check_open()
        if self.busy:
            self._campaign_asked = True
        else:
            self.node.campaign()

    def request_snapshot(self) -> None:
        self.cycle.request_snapshot()

    async def accept_data_loss(self, wake: Callable[[], None]) -> tuple[GroupStatus, GroupStatus] | None:
        """See `NodeRuntime.accept_data_loss`: `RaftNode.accept_data_loss` (rule 4) once the group is idle
        (a busy group's core belongs to its cycle until `finish`), then `wake` so a cycle persists it. The
        status before and after, or None if this replica was not repairing."""
        while self.busy:
            await self.idle.wait()
        self.check_open()
        before = self.status()
        if not self.node.accept_data_loss():
            return None
        wake()
        return before, self.status()

    async def propose(self, data: bytes, wake: Callable[[], None],
                      change: ConfChange | None = None) -> object:
        """See `NodeRuntime.propose` (and `propose_conf_change`, when `change` is given)."""
        proposal = await self.submit(data, wake, change)
        return await self.outcome(proposal)

    async def submit(self, data: bytes, wake: Callable[[], None], change: ConfChange | None = None, *,
                     after: Proposal | None = None,
                     on_settled: Callable[[Proposal], None] | None = None) -> Proposal:
        """See `NodeRuntime.submit`: admitted, then in the core's log or queued for it, in call order."""
        self.check_open()
        if self.node.role is not Role.LEADER:
            raise NotLeader(self.node.leader_id)  # before taking a permit: the common refusal is cheap
        proposal = await self.book.admit(data, change)
        proposal.after, proposal.on_settled = after, on_settled
        try:
            self.check_open()
        except GroupClosed:
            self.book.withdraw(proposal)
            raise
        if self.busy:
            self._inbox.append(proposal)
        else:
            self._propose_now(proposal)
        wake()
        return proposal

    async def outcome(self, proposal: Proposal) -> object:
        """Wait for a submitted proposal to settle; its result, or raise its error. Cancelled while the
        proposal is still queued, it is withdrawn: the core never sees it."""
        try:
            await proposal.event.wait()
        finally:
            if proposal.state is ProposalState.QUEUED:
                # Cancelled (or refused) before the core saw it: it never will.
                if proposal in self._inbox:
                    self._inbox.remove(proposal)
                self.book.withdraw(proposal)
        return proposal.outcome()

    def check_open(self) -> None:
        if self.stopped():
            raise GroupClosed(f"raft group {self.name!r} is closed: {self.closed_reason or 'closing'}")

    def _propose_now(self, proposal: Proposal) -> None:
        after, proposal.after = proposal.after, None  # no chain of references beyond the queued ones
        if after is not None and not after.chain_intact(self.node.current_term):
            self.book.settle(proposal, error=ProposalDropped("a proposal it depends on did not stay in the log"))
            return
        try:
            if proposal.change is not None:
                index = self.node.propose_conf_change(proposal.change)
            else:
                index = self.node.propose(proposal.data)
        except (NotLeader, ProposalDropped, BadConfChange) as error:
            self.book.settle(proposal, error=error)
            return
        self.book.proposed(proposal, index, self.node.current_term, self._lost)

    def _lost(self) -> BaseException:
        """The error for a proposal whose index now holds another entry: it was never committed."""
        if self.node.role is not Role.LEADER:
            return NotLeader(self.node.leader_id)
        return ProposalDropped("the entry was replaced after a change of leader")

    # --- One cycle ------------------------------------------------------------------------------

    def has_work(self) -> bool:
        if self.busy or self.stopped():
            return False
        return self.cycle.has_work()

    def take_work(self) -> Work:
        """Take this cycle's work out of the core (`GroupCycle.take`); the group is busy until `finish`."""
        invariant(not self.busy and not self.stopped(), "work is taken from an idle, open group")
        with self._halting(reraise=True):
            work = self.cycle.take()
        self.busy = True
        self.idle = trio.Event()
        return work

    def send_first_messages(self, work: Work, send: SendFn) -> None:
        """A leader's messages, before its persistence (invariant 2, `GroupCycle.send_first`); until
        `finish`, its followers' acknowledgements are stepped as they come (invariant 1)."""
        self.cycle.send_first(work, send)
        if work.ready is not None and work.ready.send_first:
            self._pipelining = send

    def _steps_while_persisting(self, message: Message) -> bool:
        return (isinstance(message, AppendEntriesResponse) and message.term == self.node.current_term
                and self.node.role is Role.LEADER)

    def send_messages(self, work: Work, send: SendFn) -> None:
        """Step 3 of the cycle; call only once the work is durable (invariant 2)."""
        self.cycle.send(work, send)

    def finish(self, work: Work) -> None:
        """Step 4 and `advance()` (`GroupCycle.finish`); then the inputs that waited. Exceptions from the
        state machine propagate: the caller fails the group (its core is never used again)."""
        self._pipelining = None
        with self._halting(reraise=True):
            self.cycle.finish(work)
            self.busy = False
            self.idle.set()
            if not self.closing:  # a closing group's waiting proposals are settled by close(), not proposed
                self._drain()

    def _drain(self) -> None:
        """Feed what arrived while busy: ticks (time passed first), messages and proposals in arrival
        order, then a leadership transfer."""
        ticks, self._ticks_pending = self._ticks_pending, 0
        for _ in range(ticks):
            self.node.tick()
        items, self._inbox = self._inbox, collections.deque()
        self._inbox_messages = 0
        for item in items:
            if isinstance(item, Proposal):
                self._propose_now(item)
                continue
            try:
                self.node.step(item)
            except PeerProtocolError as error:  # validated on arrival; kept as a second line
                log.warning("group %s: dropped a malformed message: %s", self.name, error)
        to, self._transfer_to = self._transfer_to, None
        if to is not None:
            try:
                self.node.transfer_leadership(to)
            except RaftError as error:
                log.info("group %s: leadership transfer to %s not started: %s", self.name, to, error)
        if self._campaign_asked:
            self._campaign_asked = False
            self.node.campaign()

    # --- Closing --------------------------------------------------------------------------------

    def close(self, reason: str) -> None:
        """Stop for good: settle every proposal with `GroupClosed`, close the WAL (invariant 3)."""
        if self.closed_reason is not None:
            return
        self.closed_reason = reason
        message = f"raft group {self.name!r} closed ({reason}); the proposal may or may not commit"
        queued = [item for item in self._inbox if isinstance(item, Proposal)]
        self._inbox.clear()
        self._inbox_messages = 0
        for proposal in queued:
            self.book.settle(proposal, error=GroupClosed(message))
        self.book.fail_all(lambda: GroupClosed(message))
        self.wal.close()
        self._pipelining = None
        self.busy = False
        self.idle.set()

    def status(self) -> GroupStatus:
        return GroupStatus(
            name=self.name, raft=self.node.status(), proposals_in_flight=self.book.in_flight,
            proposals_in_flight_max=self.book.in_flight_max, proposals_waiting=self.book.waiting,
            inbox_messages=self._inbox_messages, busy=self.busy, closed_reason=self.closed_reason)
