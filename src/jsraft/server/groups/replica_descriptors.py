"""File descriptors and stream replicas (layer L5): how many one replica holds, whether this node has room
for another, and what a replica that ran out of them does to the node (nothing but its own failure).

Owns: `DESCRIPTORS_PER_REPLICA` (what one stream replica keeps open, from its parts), the reserve kept for
client connections (`client_reserve`), the headroom arithmetic (`has_room`) and its checks against this
process (`Headroom`: `check_room` for a create, raising `InsufficientResources`, nats-server's 10023;
`check_open_room` for an open), and how an `OSError` from
running out of descriptors is told from other ones (`out_of_descriptors`) and logged (`log_not_opened`).

Invariants:
  1. Running out of descriptors (EMFILE: this process's limit; ENFILE: the system's) while a replica is
     prepared, formatted or opened fails that replica alone: the stream manager logs it once here, with
     the limit and the remedy, and the node serves everything else. No other errno is treated so: an
     EIO or ENOSPC, and above all a failed fsync, still stops the node (a node must not go on as if data
     were durable when the disk said it is not).
  2. A create that would leave fewer than `client_reserve(limit)` descriptors free once its replica is
     open is refused up front (`check_room`), and a replica is not opened then either (`check_open_room`:
     at a start with more replicas than the limit allows), so that clients can still connect and the
     node's own files (snapshots, temporary files, directory fsyncs) can still be opened. Without `/proc/self/fd`
     the count is unknown and nothing is refused: invariant 1 is the only guard there.
  3. `DESCRIPTORS_PER_REPLICA` is the one place the count lives; it is the file-backed replica's (a
     memory stream keeps no block open and takes one less), so the check errs on the side of refusing.
  4. A refusal is decided on a fresh count of the process's descriptors (`Headroom`): an estimate (the last
     count plus what was let in since) only lets in, and only while far from the limit.

Imports: stdlib, L3 (`meta.errors`: `InsufficientResources`, the 10023 that placement raises too).
Reference: nats-server `JSInsufficientResourcesErr`; `stream_format` (what a half-made replica leaves).
"""

from __future__ import annotations

import errno
import logging
import os
import resource
from collections.abc import Callable

from jsraft.meta.errors import InsufficientResources

log = logging.getLogger("jsraft.server.groups.streams")

# What an open stream replica keeps open between cycles: its WAL's active segment (`Wal`'s handle), its
# WAL's `raft/hardstate` file, and its file store's active message block.
WAL_SEGMENT_DESCRIPTORS = 1
HARD_STATE_DESCRIPTORS = 1
STORE_BLOCK_DESCRIPTORS = 1
DESCRIPTORS_PER_REPLICA = WAL_SEGMENT_DESCRIPTORS + HARD_STATE_DESCRIPTORS + STORE_BLOCK_DESCRIPTORS

# Kept free for what is not a replica: every client connection and route is a socket, and the node opens
# files for a moment (snapshots, atomic writes, directory fsyncs). A node at its limit that refuses new
# clients looks dead to its users, so creates stop well before: 64, or 5% of a large limit.
CLIENT_RESERVE_MIN = 64
CLIENT_RESERVE_PERCENT = 5

# Counting `/proc/self/fd` costs about 1 ms per 1,000 descriptors (13 ms at 15,000): once per create is
# nothing, once per replica opened at a start with thousands would be minutes. Between counts the
# descriptors let in are added to the last count; a count is taken again every `RECOUNT_EVERY_CHECKS`
# checks (clients come and go meanwhile), and at every check once the estimate is within
# `RECOUNT_MARGIN_RESERVES` reserves of the limit, so what is refused is decided on a fresh count.
RECOUNT_EVERY_CHECKS = 64
RECOUNT_MARGIN_RESERVES = 2

OUT_OF_DESCRIPTORS = frozenset({errno.EMFILE, errno.ENFILE})
PROC_FDS = "/proc/self/fd"


def client_reserve(limit: int) -> int:
    """Descriptors kept free for clients and short-lived files under a soft limit of `limit` (invariant 2)."""
    return max(CLIENT_RESERVE_MIN, limit * CLIENT_RESERVE_PERCENT // 100)


def has_room(*, open_count: int, needed: int, limit: int) -> bool:
    """Whether `needed` more descriptors fit beside `open_count` under `limit`, leaving the reserve."""
    return open_count + needed + client_reserve(limit) <= limit


def open_limit() -> int:
    """This process's soft `RLIMIT_NOFILE` (what `ulimit -n` shows)."""
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def open_count() -> int | None:
    """Descriptors this process has open, None where `/proc/self/fd` does not exist (invariant 2). Past
    the limit the count itself cannot be taken: the limit is returned, which has no room."""
    if not os.path.isdir(PROC_FDS):
        return None
    try:
        return len(os.listdir(PROC_FDS))
    except OSError as error:
        if error.errno in OUT_OF_DESCRIPTORS:
            return open_limit()
        raise


class Headroom:
    """Whether one more replica fits (invariant 4), for one caller at a time: the meta leader's creates
    (`check_room`) or the stream manager's opens (`check_open_room`), each with an instance of its own."""

    def __init__(self, count_fn: Callable[[], int | None] = open_count,
                 limit_fn: Callable[[], int] = open_limit) -> None:
        self.count_fn, self.limit_fn = count_fn, limit_fn
        self.counted: int | None = None  # the last count taken
        self.added = 0  # descriptors let in since that count, not counted yet
        self.checks = 0  # checks answered from the estimate since that count

    def shortage(self) -> str | None:
        """Why one more replica does not fit under the limit (invariant 2), or None when it does."""
        limit = self.limit_fn()
        if limit == resource.RLIM_INFINITY:
            return None
        needed, reserve = DESCRIPTORS_PER_REPLICA, client_reserve(limit)
        estimate = None if self.counted is None else self.counted + self.added
        if (estimate is None or self.checks >= RECOUNT_EVERY_CHECKS
                or estimate + needed + RECOUNT_MARGIN_RESERVES * reserve > limit):
            self.counted, self.added, self.checks = self.count_fn(), 0, 0
            if self.counted is None:
                return None
            estimate = self.counted
        self.checks += 1
        if has_room(open_count=estimate, needed=needed, limit=limit):
            self.added += needed
            return None
        return (f"{estimate} file descriptors open of a limit of {limit}, {reserve} kept for clients, "
                f"{needed} more per replica")

    def check_room(self) -> None:
        """A create's check (invariant 2): raise `InsufficientResources` unless one more replica fits."""
        short = self.shortage()
        if short is not None:
            log.warning("stream create refused: %s; raise the open-file limit (ulimit -n) to create more "
                        "streams", short)
            raise InsufficientResources()

    def check_open_room(self) -> None:
        """An open's check (invariant 2), run before a replica opens anything: `OSError(EMFILE)` unless one
        more replica fits, so the stream manager treats it as having run out (invariant 1) while clients
        still can connect: a node that opened replicas up to its very limit (at a start) would refuse them."""
        short = self.shortage()
        if short is not None:
            raise OSError(errno.EMFILE, f"not opened to keep descriptors for clients: {short}")


def out_of_descriptors(error: BaseException) -> bool:
    """Whether `error` says this process or the system ran out of file descriptors (invariant 1)."""
    return isinstance(error, OSError) and error.errno in OUT_OF_DESCRIPTORS


def log_not_opened(name: str, error: BaseException) -> None:
    """The one ERROR line for a replica that could not be opened: for want of descriptors (invariant 1),
    with the limits and the remedy, or for an operating error (a `JsraftError`)."""
    if not out_of_descriptors(error):
        log.error("stream %s: cannot open replica: %s", name, error)
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    log.error("stream %s: replica not opened on this node, out of file descriptors (%s; open-file limit %s, "
              "hard limit %s): raise the open-file limit (ulimit -n) and restart the server to open it",
              name, error, _shown(soft), _shown(hard))


def _shown(limit: int) -> str:
    return "unlimited" if limit == resource.RLIM_INFINITY else str(limit)
