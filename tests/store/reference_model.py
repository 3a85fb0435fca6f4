"""A deliberately naive model of the `StreamStore` semantics, the oracle of the stateful test.

Method: every operation is written the most obvious way — a dict of messages, sorted lists, totals
recomputed from scratch on every call, all-or-nothing batches tried on a copy — and shares no code
with `MemStore` beyond the codec and `subjects`, so a disagreement points at a bug in one of them.
Semantics: those stated in `jsraft.store.memstore`'s module docstring (the ones every store matches).
"""

from __future__ import annotations

import copy

from jsraft import subjects
from jsraft.codec.records import encode_message, message_digest
from jsraft.errors import (
    BadRequest,
    InvalidConfig,
    MaxBytesExceeded,
    MaxMsgsExceeded,
    MaxMsgsPerSubjectExceeded,
    MessageTooLarge,
    NoMessageFound,
    SequenceOutOfOrder,
)
from jsraft.store.base import DIGEST_RANGE_SEQS, Discard, StoreConfig, StoredMsg, StoreState, msg_size

U64_MASK = (1 << 64) - 1


class ModelStore:
    def __init__(self, config: StoreConfig) -> None:
        self.config = config.validate()
        self.msgs: dict[int, StoredMsg] = {}
        self.last_seq = 0
        self.touched = False  # has anything happened that leaves the brand-new (0, 0) state?

    # --- derived values, recomputed every time ---

    def seqs(self) -> list[int]:
        return sorted(self.msgs)

    def size(self, seq: int) -> int:
        m = self.msgs[seq]
        return msg_size(len(m.subject.encode()), len(m.headers), len(m.payload))

    def total_bytes(self) -> int:
        return sum(self.size(seq) for seq in self.msgs)

    def of_subject(self, subject: str) -> list[int]:
        return [seq for seq in self.seqs() if self.msgs[seq].subject == subject]

    def term(self, seq: int) -> int:
        m = self.msgs[seq]
        _, crc = encode_message(seq, m.timestamp_ns, m.subject.encode(), m.headers, m.payload)
        return message_digest(seq, crc)

    def state(self) -> StoreState:
        seqs = self.seqs()
        if not seqs:
            first = self.last_seq + 1 if self.touched else 0
            return StoreState(
                first_seq=first,
                last_seq=self.last_seq,
                msgs=0,
                bytes=0,
                num_deleted=0,
                num_subjects=0,
                digest=0,
            )
        return StoreState(
            first_seq=seqs[0],
            last_seq=self.last_seq,
            msgs=len(seqs),
            bytes=self.total_bytes(),
            num_deleted=self.last_seq - seqs[0] + 1 - len(seqs),
            num_subjects=len({m.subject for m in self.msgs.values()}),
            digest=sum(self.term(seq) for seq in seqs) & U64_MASK,
            first_timestamp_ns=self.msgs[seqs[0]].timestamp_ns,
            last_timestamp_ns=self.msgs[seqs[-1]].timestamp_ns,
        )

    def digest_ranges(self) -> dict[int, int]:
        ranges: dict[int, int] = {}
        for seq in self.msgs:
            number = (seq - 1) // DIGEST_RANGE_SEQS
            ranges[number] = (ranges.get(number, 0) + self.term(seq)) & U64_MASK
        return ranges

    # --- writes ---

    def append(self, seq: int, subject: str, headers: bytes, payload: bytes, timestamp_ns: int) -> None:
        self.append_batch([(seq, subject, headers, payload, timestamp_ns)])

    def append_batch(self, batch) -> None:
        # StoredMsg and StoreConfig are frozen, so copying the dict is a full copy of the state.
        trial = copy.copy(self)
        trial.msgs = dict(self.msgs)
        for message in batch:
            trial.append_one(*message)
        self.__dict__.update(trial.__dict__)

    def append_one(self, seq, subject, headers, payload, timestamp_ns) -> None:
        config = self.config
        if seq != self.last_seq + 1:
            raise SequenceOutOfOrder(self.last_seq + 1, seq)
        subjects.validate_published(subject)  # wildcard tokens stored literally
        if timestamp_ns < 0:
            raise BadRequest()
        if config.max_msg_size != -1 and len(headers) + len(payload) > config.max_msg_size:
            raise MessageTooLarge()
        if config.discard_new_per_subject and len(self.of_subject(subject)) >= config.max_msgs_per_subject:
            raise MaxMsgsPerSubjectExceeded()
        self.msgs[seq] = StoredMsg(
            subject=subject, seq=seq, headers=headers, payload=payload, timestamp_ns=timestamp_ns
        )
        self.last_seq = seq
        self.touched = True
        self.enforce_per_subject([subject])
        if config.discard == Discard.new:
            if config.max_msgs != -1 and len(self.msgs) > config.max_msgs:
                raise MaxMsgsExceeded()
            if config.max_bytes != -1 and self.total_bytes() > config.max_bytes:
                raise MaxBytesExceeded()
        else:
            self.enforce_old()

    def enforce_per_subject(self, names) -> None:
        if self.config.max_msgs_per_subject == -1:
            return
        for name in names:
            seqs = self.of_subject(name)
            for seq in seqs[: max(0, len(seqs) - self.config.max_msgs_per_subject)]:
                del self.msgs[seq]

    def enforce_old(self) -> None:
        config = self.config
        while config.max_msgs != -1 and len(self.msgs) > config.max_msgs:
            del self.msgs[self.seqs()[0]]
        while config.max_bytes != -1 and self.total_bytes() > config.max_bytes:
            del self.msgs[self.seqs()[0]]

    def skip(self, seq: int, count: int = 1) -> None:
        if seq != self.last_seq + 1:
            raise SequenceOutOfOrder(self.last_seq + 1, seq)
        if count < 1:
            raise BadRequest()
        self.last_seq += count
        self.touched = True

    # --- removal ---

    def delete(self, seq: int) -> bool:
        if seq not in self.msgs:
            return False
        del self.msgs[seq]
        self.touched = True
        return True

    erase = delete

    def purge(self, subject=None, seq=None, keep=None) -> int:
        if subject is not None:
            subjects.validate(subject, wildcards=True)
        if (seq or 0) < 0 or (keep or 0) < 0 or (seq and keep):
            raise BadRequest()
        if subject in (None, ">") and seq:
            return self.compact(seq)
        victims = [
            s for s in self.seqs() if (subject is None or subjects.matches(subject, self.msgs[s].subject))
            and (not seq or s < seq)
        ]
        if keep:
            victims = victims[:-keep]
        for victim in victims:
            del self.msgs[victim]
        self.touched = True
        return len(victims)

    def compact(self, seq: int) -> int:
        if seq < 1:
            raise BadRequest()
        victims = [s for s in self.seqs() if s < seq]
        for victim in victims:
            del self.msgs[victim]
        self.last_seq = max(self.last_seq, seq - 1)
        self.touched = True
        return len(victims)

    def truncate(self, seq: int) -> None:
        low = max(0, self.state().first_seq - 1)
        if not low <= seq <= self.last_seq:
            raise BadRequest()
        if seq == self.last_seq:
            return
        for victim in [s for s in self.seqs() if s > seq]:
            del self.msgs[victim]
        self.last_seq = seq
        self.touched = True

    def expire(self, cutoff_ns: int) -> int:
        removed = 0
        for seq in self.seqs():
            if self.msgs[seq].timestamp_ns >= cutoff_ns:
                break
            del self.msgs[seq]
            removed += 1
            self.touched = True
        return removed

    def update_config(self, config: StoreConfig) -> None:
        config.validate()
        if config.name != self.config.name:
            raise InvalidConfig()
        self.config = config
        self.enforce_per_subject({m.subject for m in self.msgs.values()})
        if config.discard == Discard.old:
            self.enforce_old()

    # --- reads ---

    def load(self, seq: int) -> StoredMsg:
        if seq not in self.msgs:
            raise NoMessageFound()
        return self.msgs[seq]

    def load_last(self, subject_filter: str = ">") -> StoredMsg:
        subjects.validate(subject_filter, wildcards=True)
        found = [s for s in self.seqs() if subjects.matches(subject_filter, self.msgs[s].subject)]
        if not found:
            raise NoMessageFound()
        return self.msgs[found[-1]]

    def last_matching_seq(self, subject_filter: str = ">") -> int:
        try:
            return self.load_last(subject_filter).seq
        except NoMessageFound:
            return 0

    def load_next(self, filters, start_seq: int) -> StoredMsg:
        if filters is None:
            names = [">"]
        else:
            names = [filters] if isinstance(filters, str) else list(filters) or [">"]
        for name in names:
            subjects.validate(name, wildcards=True)
        for seq in self.seqs():
            if seq >= start_seq and any(subjects.matches(n, self.msgs[seq].subject) for n in names):
                return self.msgs[seq]
        raise NoMessageFound()

    def subject_counts(self, subject_filter: str = ">") -> dict[str, int]:
        subjects.validate(subject_filter, wildcards=True)
        counts: dict[str, int] = {}
        for m in self.msgs.values():
            if subjects.matches(subject_filter, m.subject):
                counts[m.subject] = counts.get(m.subject, 0) + 1
        return counts
