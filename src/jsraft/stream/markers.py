"""Subject delete markers (ADR-48 "limit markers", `subject_delete_marker_ttl`): what the leader stores in
place of a subject's last message when `max_age` or its `Nats-TTL` removes it.

Owns: the marker's headers (nats-server's exact set: `Nats-Marker-Reason: MaxAge`, `Nats-TTL: <the
stream's marker TTL as a Go duration>`, `Nats-Rollup: sub`), `is_marker` (nats-server's
`isSubjectDeleteMarker`: a `Nats-Marker-Reason` header, or a KV purge marker), the TTL floor a TTL'd
publish gets on such a stream, and `expired_head`, the messages an EXPIRE would remove.

Invariants:
  1. A marker is an ordinary publish decided by the stream leader and replicated as a MSGS entry with the
     rollup-subject flag: every replica stores it at the same sequence with the same timestamp, and its
     rollup removes the expired message (and any older one on the subject) as it is applied. Replicas
     never write markers on their own clocks (DESIGN §6).
  2. A marker replaces only a subject's LAST message (counting in-flight publishes), and never a marker:
     a marker's own expiry is a plain removal, so markers do not beget markers.
  3. A marker carries a `Nats-TTL` of the stream's marker TTL, so it expires in turn.

Imports: L0, L2 (`store` values), `stream.headers`. Reference: ADR-48 (TTL, limit markers);
nats-server `server/filestore.go` (`expireMsgs`, `handleRemovalOrSdm`), `server/sdm.go`,
`server/stream.go` (`processJetStreamMsg`: the TTL floor).
"""

from __future__ import annotations

from jsraft.errors import DamagedSequence, NoMessageFound
from jsraft.store.base import StoredMsg, StreamStore
from jsraft.stream import headers as hdr

MARKER_REASON = "Nats-Marker-Reason"
REASON_MAX_AGE = "MaxAge"
KV_OPERATION = "KV-Operation"
KV_PURGE = "PURGE"
SECOND_NS = 1_000_000_000
SCAN_MAX = 1024  # messages `expired_head` looks at per call (bounded work per expiry tick)


def go_duration(seconds: int) -> str:
    """Whole seconds as Go's `time.Duration.String` writes them: `3s`, `1m0s`, `1h2m3s`."""
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    if minutes:
        return f"{minutes}m{secs}s"
    return f"{secs}s"


def marker_headers(marker_ttl_s: int) -> bytes:
    """The headers of a marker left by `max_age` or TTL expiry (nats-server's, in its order)."""
    return (f"NATS/1.0\r\n{MARKER_REASON}: {REASON_MAX_AGE}\r\n{hdr.TTL}: {go_duration(marker_ttl_s)}\r\n"
            f"{hdr.ROLLUP}: {hdr.ROLLUP_SUBJECT}\r\n\r\n").encode()


def is_marker(headers: bytes) -> bool:
    """Whether stored headers make a message a subject delete marker (nats-server `isSubjectDeleteMarker`:
    a non-empty `Nats-Marker-Reason`, or a KV purge marker's `KV-Operation: PURGE`)."""
    if not headers or (MARKER_REASON.encode() not in headers and KV_OPERATION.encode() not in headers):
        return False
    for line in headers.split(b"\r\n")[1:]:
        name, colon, value = line.partition(b":")
        if not colon:
            continue
        if name == MARKER_REASON.encode() and value.strip():
            return True
        if name == KV_OPERATION.encode() and value.strip() == KV_PURGE.encode():
            return True
    return False


def marker_ttl_s(marker_ttl_ns: int) -> int:
    """The stream's `subject_delete_marker_ttl` in whole seconds (nats-server truncates the same way)."""
    return marker_ttl_ns // SECOND_NS if marker_ttl_ns > 0 else 0


def ttl_floor(ttl_s: int, marker_ttl_ns: int, max_msgs_per_subject: int) -> int:
    """A publish's TTL on a stream with markers: at least the marker TTL (unless the stream keeps one
    message per subject), so that a marker already on the subject cannot outlive the message after it
    and hide its expiry (nats-server `processJetStreamMsg`)."""
    floor = marker_ttl_s(marker_ttl_ns)
    if ttl_s > 0 and floor and max_msgs_per_subject != 1 and ttl_s < floor:
        return floor
    return ttl_s


def with_ttl(headers: bytes, ttl_s: int) -> bytes:
    """`headers` with its `Nats-TTL` line replaced by `ttl_s` (whole seconds)."""
    lines = headers.split(b"\r\n")
    name = hdr.TTL.encode().lower() + b":"
    out = [line if not line.lower().startswith(name) else hdr.TTL.encode() + b": " + str(ttl_s).encode()
           for line in lines]
    return b"\r\n".join(out)


def expired_head(store: StreamStore, cutoff_ns: int) -> tuple[list[StoredMsg], int]:
    """`(the messages older than cutoff_ns from the head, at most SCAN_MAX; the first sequence not
    looked at)`: what an EXPIRE bounded by that sequence removes. A damaged record stops the scan."""
    found: list[StoredMsg] = []
    seq = 0
    while len(found) < SCAN_MAX:
        try:
            msg = store.load_next(None, seq)
        except (NoMessageFound, DamagedSequence):
            return found, seq
        if msg.timestamp_ns >= cutoff_ns:  # the store's rule: older than the cut-off expires
            return found, msg.seq
        found.append(msg)
        seq = msg.seq + 1
    return found, seq
