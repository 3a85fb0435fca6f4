"""The data source's options, read once into frozen values (layer L6).

Owns: `ReadOptions` (batch and streaming reads), `WriteOptions`, and the parsing of Spark's string options
into them. Option names are case-insensitive (Spark hands them over that way) and documented in README.md.

Invariants:
  1. Every option is checked when the query is planned, on the driver: a bad value raises `BadOption`
     naming the option and the value, before any task starts.
  2. The values are plain and picklable (they travel to Spark's Python workers inside partitions).

Imports: stdlib, attrs, L6 siblings.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping

import attrs

from jsraft.spark.errors import BadOption

PARTITIONS_MAX = 256
SEQS_PER_PARTITION = 125_000  # default partitioning: one task per this many sequences (more tasks than
# cores keeps the server busy while a task's rows are handed to Spark)


def _get(options: Mapping[str, str], name: str) -> str | None:
    lowered = {str(k).lower(): v for k, v in options.items()}
    value = lowered.get(name.lower())
    return None if value is None or str(value).strip() == "" else str(value).strip()


def _int(options: Mapping[str, str], name: str, default: int | None = None, *, minimum: int = 0) -> int | None:
    text = _get(options, name)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise BadOption(f"option {name}={text!r}: not an integer") from None
    if value < minimum:
        raise BadOption(f"option {name}={value}: must be at least {minimum}")
    return value


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    text = _get(options, name)
    if text is None:
        return default
    if text.lower() not in ("true", "false"):
        raise BadOption(f"option {name}={text!r}: must be true or false")
    return text.lower() == "true"


def parse_time_ns(text: str, name: str) -> int:
    """An ISO 8601 time (`2026-11-27T10:00:00Z`; no zone means UTC) as ns since the epoch."""
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise BadOption(f"option {name}={text!r}: not an ISO 8601 time") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return int(moment.timestamp()) * 1_000_000_000 + moment.microsecond * 1000


def servers_of(options: Mapping[str, str]) -> tuple[str, ...]:
    text = _get(options, "servers")
    if text is None:
        raise BadOption("option servers is required: a comma list of nats:// URLs, e.g. nats://127.0.0.1:4222")
    servers = tuple(s.strip() for s in text.split(",") if s.strip())
    for url in servers:
        if not url.startswith(("nats://", "tls://")) and "://" in url:
            raise BadOption(f"option servers: {url!r} is not a nats:// URL")
    return servers


def stream_of(options: Mapping[str, str], *, required: bool = True) -> str:
    name = _get(options, "stream")
    if name is None and required:
        raise BadOption("option stream is required: the stream's name")
    if name is not None and any(c in name for c in " .*>\t\r\n"):
        raise BadOption(f"option stream={name!r}: not a stream name")
    return name or ""


@attrs.frozen(kw_only=True)
class ReadOptions:
    servers: tuple[str, ...] = ()
    stream: str = ""
    path: str = ""  # an offline read of a node's (or a store's) directory
    subjects: tuple[str, ...] = ()
    start_seq: int | None = None
    start_time_ns: int | None = None
    end_seq: int | None = None
    partitions: int | None = None
    starting_offsets: str = "earliest"
    max_records_per_trigger: int | None = None
    fail_on_data_loss: bool = True

    @staticmethod
    def parse(options: Mapping[str, str]) -> "ReadOptions":
        path = _get(options, "path") or ""
        start_time = _get(options, "startTime")
        subjects = tuple(s.strip() for s in (_get(options, "subjects") or "").split(",") if s.strip())
        for subject in subjects:
            if " " in subject or subject.startswith(".") or subject.endswith(".") or ".." in subject:
                raise BadOption(f"option subjects: {subject!r} is not a subject filter")
        parsed = ReadOptions(
            servers=() if path else servers_of(options), stream=stream_of(options, required=not path), path=path,
            subjects=subjects, start_seq=_int(options, "startSeq", minimum=1),
            start_time_ns=parse_time_ns(start_time, "startTime") if start_time else None,
            end_seq=_int(options, "endSeq", minimum=0), partitions=_int(options, "partitions", minimum=1),
            starting_offsets=(_get(options, "startingOffsets") or "earliest"),
            max_records_per_trigger=_int(options, "maxRecordsPerTrigger", minimum=1),
            fail_on_data_loss=_bool(options, "failOnDataLoss", True),
        )
        if parsed.partitions is not None and parsed.partitions > PARTITIONS_MAX:
            raise BadOption(f"option partitions={parsed.partitions}: at most {PARTITIONS_MAX}")
        if parsed.start_seq is not None and parsed.start_time_ns is not None:
            raise BadOption("options startSeq and startTime exclude each other")
        return parsed


@attrs.frozen(kw_only=True)
class WriteOptions:
    servers: tuple[str, ...]
    stream: str = ""  # when given, every publish says Nats-Expected-Stream: a row never lands elsewhere
    sink_id: str = ""

    @staticmethod
    def parse(options: Mapping[str, str]) -> "WriteOptions":
        return WriteOptions(servers=servers_of(options), stream=stream_of(options, required=False),
                            sink_id=_get(options, "sinkId") or _get(options, "checkpointLocation") or "")


def split_range(first: int, last: int, partitions: int | None) -> list[tuple[int, int]]:
    """`first..last` in contiguous, ordered, non-overlapping ranges (`partitions` of them at most)."""
    if last < first:
        return []
    span = last - first + 1
    count = partitions or max(1, min(PARTITIONS_MAX, -(-span // SEQS_PER_PARTITION)))
    count = min(count, span)
    size = -(-span // count)
    return [(start, min(last, start + size - 1)) for start in range(first, last + 1, size)]
