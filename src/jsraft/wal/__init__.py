"""WAL (layer L2): a Raft group's log, hard state and snapshots on a `Disk`.

Public surface: `Wal` (open with `Wal.open(disk)`), `Recovered` (what a restart finds; a vote lost with
the hard state comes back as `vote_fence_term`, never as a marker in `voted_for`), and the segment size
bounds. See `log` for how each change is made durable, `scan` for the recovery rules (torn tail vs corruption, missing segments, log matching),
`recovery` for hard-state and snapshot fallbacks, and `format` for the bytes.

Imports: L0, L1 only (stdlib, attrs, crc32c, `errors`, `limits`, `codec`, `raft.types`, the `disk`
protocol). No trio, socket, time, threading or module-level random; no `open()`: all I/O goes through the
`Disk` it is given.
"""

from jsraft.wal.log import SEGMENT_BYTES_DEFAULT, SEGMENT_BYTES_MIN, Wal
from jsraft.wal.recovery import Recovered

__all__ = ["SEGMENT_BYTES_DEFAULT", "SEGMENT_BYTES_MIN", "Recovered", "Wal"]
