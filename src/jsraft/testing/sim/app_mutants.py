"""App mutants: broken state machines that one replica runs, to show the app checkers have teeth.

Owns: `APP_MUTANTS`, name -> (app, node that runs the broken machine), for `--mutant NAME` next to the
Raft mutants of `mutants`, and `stream_machine_class`, which the stream app asks for each replica's class.
Never production code: nothing outside `jsraft.testing` imports this module.

  stream-skip-delete   node `n1`'s `StreamStateMachine` skips every DELETE entry (it moves its applied
                       index and answers as if it deleted, but its store keeps the message): the replica
                       silently diverges, which the audit checker catches at the next AUDIT entry
                       (`stream-audit`: its state tuple differs from the other replicas' at that index).
  consumer-skip-ops    node `n1`'s consumers never see CONSUMER entries (its stream machine applies them):
                       its consumer set diverges (`consumer-state` / `ack-floor` at the next report).
  meta-skip-peer-remove  node `n1`'s `MetaStateMachine` skips every PEER_REMOVE entry: its assignments
                       diverge (`state-machine-safety`: its meta digest differs at that index).

Invariants:
  1. A mutant differs from the real machine in one entry kind only, on one node only.
  2. Raft runs unmodified under an app mutant (`mutants.node_class` gives `RaftNode`).

Imports: `jsraft.stream`, `jsraft.meta`.
"""

from __future__ import annotations

from jsraft.meta import Applied, MetaStateMachine, PeerRemove, decode_entry
from jsraft.stream import ApplyResult, EntryKind, StreamStateMachine
from jsraft.stream.entries import entry_kind


class SkipDeleteMachine(StreamStateMachine):
    def apply(self, index: int, data: bytes) -> ApplyResult:
        if index == self.applied_index + 1 and entry_kind(data) is EntryKind.DELETE:
            self.applied_index = index
            return ApplyResult(index, EntryKind.DELETE, removed=1)
        return super().apply(index, data)


class SkipPeerRemoveMachine(MetaStateMachine):
    def apply(self, index: int, data: bytes) -> Applied:
        entry = decode_entry(data)
        if isinstance(entry, PeerRemove):
            self.note_applied(index)
            return Applied(index=index, kind=entry.kind, target=entry.peer)
        return super().apply(index, data)


APP_MUTANTS: dict[str, tuple[str, str]] = {
    "stream-skip-delete": ("stream", "n1"),
    "meta-skip-peer-remove": ("meta", "n1"),
    "consumer-skip-ops": ("consumer", "n1"),  # built by consumer_app.ConsumerApp.machine_class
}


def stream_machine_class(mutant: str | None, node_id: str) -> type[StreamStateMachine]:
    if mutant == "stream-skip-delete" and node_id == APP_MUTANTS[mutant][1]:
        return SkipDeleteMachine
    return StreamStateMachine


def meta_machine_class(mutant: str | None, node_id: str) -> type[MetaStateMachine]:
    if mutant == "meta-skip-peer-remove" and node_id == APP_MUTANTS[mutant][1]:
        return SkipPeerRemoveMachine
    return MetaStateMachine
