"""A peer's bounded queue of encoded frames waiting for its link's writer (layer L4).

Owns: the only place a sender's frames wait. `put()` never blocks: a full queue refuses the frame and the
caller counts a drop — Raft resends what matters (heartbeats, AppendEntries retries), so losing a message
to a slow peer costs a retry, whereas blocking would let one slow peer stall every group on the node.

Invariants:
  1. `len(queue) <= frames_max` and `queued_bytes <= bytes_max` at all times: memory held for one peer
     is bounded whatever the peer does.
  2. Only a live writer takes frames: `take()` raises `Cancelled` before popping anything in a cancelled
     scope, so frames are not handed to the writer of a link that was already superseded.
  3. Frames leave in the order they were put (Raft tolerates loss, but reordering within a link would
     make every AppendEntries after a gap look like a conflict).

Imports: stdlib, L0, trio. Reference: TigerBeetle TIGER_STYLE ("put a limit on everything").
"""

from __future__ import annotations

from collections import deque

import trio

from jsraft.errors import invariant


class SendQueue:
    __slots__ = ("_frames", "_bytes", "_frames_max", "_bytes_max", "_nonempty")

    def __init__(self, frames_max: int, bytes_max: int) -> None:
        invariant(frames_max >= 1 and bytes_max >= 1, "queue bounds are positive")
        self._frames: deque[bytes] = deque()
        self._bytes = 0
        self._frames_max = frames_max
        self._bytes_max = bytes_max
        self._nonempty = trio.Event()

    def __len__(self) -> int:
        return len(self._frames)

    @property
    def queued_bytes(self) -> int:
        return self._bytes

    def has_room(self, frame_bytes: int, headroom: float = 0.0) -> bool:
        """Whether `put()` of a frame this size would succeed (checked before encoding, to save work) and
        leave at least the fraction `headroom` of both bounds free (a bulk sender keeps room for others)."""
        frames_max, bytes_max = self._frames_max, self._bytes_max
        if headroom:
            frames_max -= int(frames_max * headroom)
            bytes_max -= int(bytes_max * headroom)
        return len(self._frames) < frames_max and self._bytes + frame_bytes <= bytes_max

    def put(self, frame: bytes) -> bool:
        """Queue `frame` for the writer; False (and nothing queued) when the queue is full."""
        if not self.has_room(len(frame)):
            return False
        self._frames.append(frame)
        self._bytes += len(frame)
        self._nonempty.set()
        invariant(len(self._frames) <= self._frames_max and self._bytes <= self._bytes_max, "queue bounded")
        return True

    async def take(self, bytes_max: int) -> list[bytes]:
        """Wait for frames, then remove and return the oldest ones: at least one, and more while their
        total stays within `bytes_max` (one write per batch instead of one per frame)."""
        # A writer whose link was superseded before it first ran would otherwise pop frames without ever
        # reaching a checkpoint (frames present: no wait), and lose them with its cancelled link.
        await trio.lowlevel.checkpoint_if_cancelled()
        while not self._frames:
            if self._nonempty.is_set():
                self._nonempty = trio.Event()
            await self._nonempty.wait()
        batch = [self._frames.popleft()]
        total = len(batch[0])
        while self._frames and total + len(self._frames[0]) <= bytes_max:
            frame = self._frames.popleft()
            batch.append(frame)
            total += len(frame)
        self._bytes -= total
        invariant(self._bytes >= 0, "queued bytes never negative")
        return batch

    def clear(self) -> int:
        """Drop every queued frame (the link is gone); return how many were dropped."""
        dropped = len(self._frames)
        self._frames.clear()
        self._bytes = 0
        return dropped
