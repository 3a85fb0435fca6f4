"""Store operations for applying stream entries, each safe to replay (layer L3).

Owns: the store-facing half of `StreamStateMachine.apply`: appending a MSGS run (with a per-message
fallback when the store refuses), verifying a replayed MSGS run against what the store already holds,
the bounded forms of PURGE and EXPIRE, and a DELETE with nats-server's answer when nothing was removed.

Invariants:
  1. Every function leaves the store's `last_seq` where the log says it is: a message the store refuses
     at apply time still consumes its sequence (`skip`), identically on every replica that agrees.
  2. Bounded removals: a PURGE or EXPIRE never removes a message above the bound its entry carries, so
     replaying an entry against a store that already applied later entries changes nothing it should not.
  3. Replay verification compares content (subject, headers, payload, timestamp), never trusts position.
  4. `read_back` reads every live message of its range through the store's checked reads: a record that
     does not verify raises `DamagedSequence` (and the store lists it), never passes silently.

Imports: L0, L1 (`codec.records`), L2 (`store`). Reference: nats-server `server/jetstream_cluster.go`
(`applyStreamEntries`: purge stamped with the leader's last sequence so replays are safe).
"""

from __future__ import annotations

from jsraft import subjects
from jsraft.codec.records import encode_message
from jsraft.errors import DamagedSequence, JsraftError, NoMessageFound
from jsraft.store.base import StreamStore
from jsraft.stream.entries import FLAG_ROLLUP_ALL, FLAG_ROLLUP_SUBJECT, FLAG_SCHEDULE_PURGE, EntryMsg
from jsraft.stream.schedules import scheduler_of
from jsraft.stream.outcomes import ApiError, delete_failed

READ_BACK_RUN = 4096  # messages per batched read of `read_back`


def append_run(store: StreamStore, first_seq: int, msgs: list[EntryMsg]) -> dict[int, ApiError]:
    """Append messages with seqs `first_seq ..`; return the seqs the store refused, with why.

    The whole run goes in one `append_batch` (the fast path). If the store refuses it (a `discard: new`
    limit the leader did not foresee, a config change in between), messages go one at a time and each
    refused one consumes its sequence with `skip`, so every replica ends at the same `last_seq`.
    """
    batch = [(first_seq + i, m[0], m[1], m[2], m[3]) for i, m in enumerate(msgs)]
    try:
        store.append_batch(batch)
        return {}
    except JsraftError:
        pass
    refused: dict[int, ApiError] = {}
    for item in batch:
        try:
            store.append_batch((item,))
        except JsraftError as error:
            store.skip(item[0], 1)
            refused[item[0]] = ApiError.from_error(error)
    return refused


def verify_run(store: StreamStore, first_seq: int, msgs: list[EntryMsg]) -> int | None:
    """Compare replayed messages with the store's; return the first seq whose content differs.

    A message the store no longer holds is accepted: a later entry (a delete, a limit) may have removed
    it before the restart, and the post-recovery audit checks the result. A damaged one is rewritten from
    the replayed entry, which is the committed content (the WAL verified its CRC): the store is not
    fsynced per batch (DESIGN §2), so a power cut can leave torn or zeroed records anywhere after its last
    fsync, on every replica at once, and only the log still holds them. Repairing from a peer would find
    them damaged there too.
    """
    offset = 0
    while True:
        offset = store.held_run(first_seq, msgs, offset)  # the stored records byte for byte these: read, not trusted
        if offset >= len(msgs):
            return None
        subject, headers, payload, timestamp_ns, _, _ = msgs[offset]
        seq = first_seq + offset
        offset += 1
        try:
            held = store.load(seq)
        except NoMessageFound:
            continue
        except DamagedSequence:
            store.repair(seq, subject, headers, payload, timestamp_ns)
            continue
        if (held.subject, held.headers, held.payload, held.timestamp_ns) != (subject, headers, payload, timestamp_ns):
            return seq


def read_back(store: StreamStore, first: int, last: int) -> None:
    """Read the live messages in `[first, last]` back, every record CRC-checked (`verify_run`, and `load_next`
    where a run stops, which settles a damaged record: `DamagedSequence`, the store lists the fault). What
    a snapshot's compaction makes the log unable to rewrite is read once before the log drops it."""
    seq = max(first, 1)
    while seq <= last:
        # The verdict of `load_run`, without decoding each message: the read-back of every applied message
        # was the largest cost of a follower under publish load (issue #18's profile).
        verified = store.verify_run(seq, min(READ_BACK_RUN, last - seq + 1))
        if verified:
            seq = verified + 1
            continue
        try:
            seq = store.load_next(None, seq).seq + 1
        except NoMessageFound:
            return


def live_seqs(store: StreamStore, first: int, last: int, subject_filter: str | None = None) -> list[int]:
    """Live sequences in `first..last` (matching the filter), by walking `load_next`. One found damaged
    on the way (a store fault from now on) is still listed: the caller removes it as the group does."""
    found: list[int] = []
    seq = first
    while seq <= last:
        try:
            found_seq = store.load_next(subject_filter, seq).seq
        except NoMessageFound:
            break
        except DamagedSequence as error:
            found_seq = error.seq
        if found_seq > last:
            break
        found.append(found_seq)
        seq = found_seq + 1
    return found


def flagged_purge(store: StreamStore, store_last_seq: int, msg: EntryMsg, seq: int) -> None:
    """The purge a flagged message of a MSGS entry runs once stored at `seq`, bounded by it: its subject
    keeping 1 (`Nats-Rollup: sub`), the stream keeping 1 (`all`), or else the subject of its schedule
    (`Nats-Scheduler`, a fired schedule's `Nats-Schedule-Next: purge`: `stream.schedules`)."""
    subject, headers, flags = msg[0], msg[1], msg[5]
    if flags & FLAG_ROLLUP_SUBJECT:
        purge_bounded(store, store_last_seq, subject, None, 1, seq)
    elif flags & FLAG_ROLLUP_ALL:
        purge_bounded(store, store_last_seq, None, None, 1, seq)
    elif flags & FLAG_SCHEDULE_PURGE:
        scheduler = scheduler_of(headers)
        if scheduler is not None:
            purge_bounded(store, store_last_seq, scheduler, None, None, seq)


def purge_bounded(store: StreamStore, store_last_seq: int, subject: str | None, seq: int | None,
                  keep: int | None, last_seq: int) -> int:
    """JetStream purge over the messages at or below `last_seq` only; returns how many were removed.

    When the store is exactly at the entry's position (always, outside a replay) this is the store's own
    `purge`. Otherwise the victims are computed among the messages up to `last_seq`.
    """
    if subject is not None and subjects.validate(subject, wildcards=True) == ">":
        subject = None
    if store_last_seq <= last_seq:
        return store.purge(subject, seq, keep)
    if subject is None and keep is None:
        return store.compact(min(seq or last_seq + 1, last_seq + 1))
    victims = live_seqs(store, 1, min(last_seq, (seq or last_seq + 1) - 1), subject)
    if keep is not None:
        victims = victims[: max(0, len(victims) - keep)]
    return sum(store.delete(victim) for victim in victims)


def delete(store: StreamStore, seq: int, *, erase: bool) -> ApiError | None:
    """Delete (or erase) message `seq`; `None` when it was removed, else nats-server's file store answer.

    A sequence inside the live range `[first_seq, last_seq]` that holds no message (deleted before) is
    400/10043 "sequence N not found" (JSSequenceNotFoundErrF); below `first_seq`, or in an empty stream,
    the delete failed: 500/10057 "no message found". Read from the store as of this entry, so every
    replica that agrees answers the same.
    """
    if store.erase(seq) if erase else store.delete(seq):
        return None
    state = store.state()
    if state.msgs > 0 and state.first_seq <= seq <= state.last_seq:
        return ApiError(400, 10043, f"sequence {seq} not found")
    return delete_failed("no message found")


def expire_bounded(store: StreamStore, store_last_seq: int, cutoff_ns: int, up_to_seq: int) -> int:
    """Remove messages older than `cutoff_ns` from the head, none at or above `up_to_seq`."""
    if store_last_seq < up_to_seq:
        return store.expire(cutoff_ns)
    try:
        barrier = store.load_next(None, up_to_seq).timestamp_ns
    except (NoMessageFound, DamagedSequence):  # a damaged one is a fault now: expiry stops at faults
        return store.expire(cutoff_ns)
    # Expiry stops at the first message not older than the cut-off; lowering the cut-off to the first
    # message at or above the bound makes it stop there at the latest.
    return store.expire(min(cutoff_ns, barrier))


def expire_entry(store: StreamStore, store_last_seq: int, cutoff_ns: int,
                 up_to_seq: int) -> tuple[int, tuple[int, int] | None]:
    """An EXPIRE entry: the messages removed, and the expiry owed while a fault below the bound may have
    stopped it (expiry never crosses one, `fs_ops.first_not_expired`; machine invariant 6)."""
    removed = expire_bounded(store, store_last_seq, cutoff_ns, up_to_seq)
    return removed, ((cutoff_ns, up_to_seq) if any(f.first < up_to_seq for f in store.faults()) else None)


def settle_owed_expire(store: StreamStore, store_last_seq: int, owed: tuple[int, int]) -> tuple[int, int] | None:
    """Run an owed expiry again once no fault is left below its bound; what is still owed (or None).

    Exact: a leader never decides a timestamp below the last one (`StreamLeader.decide`), so every live
    message below the bound older than the cut-off is one the group's expiry removed when it applied."""
    if any(f.first < owed[1] for f in store.faults()):
        return owed
    expire_bounded(store, store_last_seq, *owed)
    return None


def content_crc(seq: int, subject: str, headers: bytes, payload: bytes, timestamp_ns: int) -> int:
    """The CRC of a message's canonical `MSG` record: what the store's digest is built on."""
    return encode_message(seq, timestamp_ns, subject.encode(), headers, payload)[1]
