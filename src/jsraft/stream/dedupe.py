"""The duplicate-detection window of a stream, maintained from applied entries (layer L3).

Owns: `DedupeWindow`, the map `Nats-Msg-Id -> (seq, timestamp_ns)` of messages applied within
`duplicate_window` of the newest applied message.

Invariants:
  1. Deterministic: it changes only when an entry is applied (MSGS, CONFIG, snapshot restore) and
     ages by the timestamps the leader wrote into the entries, never by a clock. Every replica that
     applied the same entries holds the same window, so a new leader dedupes exactly as the old one.
  2. Insertion order is timestamp order (the leader never lets timestamps go backwards), so expiry
     pops from the front.
  3. Bounded: at most `DEDUPE_IDS_MAX` ids; past it the oldest are dropped (the same ones everywhere).

Imports: stdlib. Reference: nats-server `server/stream.go` (`ddmap`, `checkMsgId`, `purgeMsgIds`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

# A window holds one id per message published within `duplicate_window` (2 min by default); a
# million ids is ~8k msgs/s sustained for two minutes, and about 150 MB at worst. Past it the oldest
# ids age out early, identically on every replica.
DEDUPE_IDS_MAX = 1 << 20


class DedupeWindow:
    __slots__ = ("window_ns", "_ids")

    def __init__(self, window_ns: int) -> None:
        self.window_ns = window_ns
        self._ids: OrderedDict[str, tuple[int, int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._ids)

    def get(self, msg_id: str) -> tuple[int, int] | None:
        """`(seq, timestamp_ns)` of the message that carried `msg_id`, if it is still in the window."""
        return self._ids.get(msg_id)

    def record(self, msg_id: str, seq: int, timestamp_ns: int) -> None:
        ids = self._ids
        if msg_id in ids:
            ids.move_to_end(msg_id)
        ids[msg_id] = (seq, timestamp_ns)
        if len(ids) > DEDUPE_IDS_MAX:
            ids.popitem(last=False)

    def expire(self, newest_timestamp_ns: int) -> None:
        """Forget ids older than `duplicate_window` before the newest applied message."""
        if not self.window_ns:
            self._ids.clear()
            return
        cutoff = newest_timestamp_ns - self.window_ns
        ids = self._ids
        while ids:
            first = next(iter(ids.values()))
            if first[1] >= cutoff:
                break
            ids.popitem(last=False)

    def items(self) -> list[tuple[str, int, int]]:
        return [(msg_id, seq, ts) for msg_id, (seq, ts) in self._ids.items()]

    @classmethod
    def from_items(cls, window_ns: int, items: Iterable[tuple[str, int, int]]) -> "DedupeWindow":
        window = cls(window_ns)
        for msg_id, seq, ts in items:
            window.record(msg_id, seq, ts)
        return window
