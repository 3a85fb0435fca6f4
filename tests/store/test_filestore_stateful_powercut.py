"""Stateful property test: FileStore under random operations, clean reopens and power cuts, with
`MemStore` as the model.

Method: Hypothesis drives a FileStore (small blocks, sometimes zstd) on `OsDisk(shadow=True)` and a
`MemStore` with the same operations. Between cuts they must agree exactly (state tuple, digest ranges,
every message). `sync` records what the model held at that moment. A `power_cut` rule drops the store
without closing, rolls the directory back with `power_cut(root, mode, seed)` and reopens; then:
  - no sequence at or below the last sync is reported damaged;
  - every message the model held at the last sync is served byte-identical, unless the model deleted
    it after that sync (a delete that may or may not have reached the disk);
  - every message the store serves was written by the model (no phantom or mixed bytes).
The store is then cut back to the synced point (what a replica does when its log is behind its store),
its limits applied (opening applies none), the model is rebuilt from what survived, and the run continues — so recovery's own writes are exercised
by later cuts.
"""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from jsraft.disk import OsDisk, power_cut
from jsraft.errors import DamagedSequence, JsraftError, NoMessageFound
from jsraft.store import StoreConfig
from jsraft.store.filestore import FileStore
from jsraft.store.memstore import MemStore

SUBJECTS = ["a", "b", "a.x", "b.y"]


def _live(store) -> dict[int, tuple[str, bytes, bytes]]:
    state = store.state()
    found = {}
    for seq in range(max(state.first_seq, 1), state.last_seq + 1):
        try:
            msg = store.load(seq)
        except (NoMessageFound, DamagedSequence):
            continue
        found[seq] = (msg.subject, msg.headers, msg.payload)
    return found


class PowerCutMachine(RuleBasedStateMachine):
    root = ""

    @initialize(zstd=st.booleans(), per_subject=st.sampled_from([-1, -1, 2]))
    def open_store(self, zstd: bool, per_subject: int) -> None:
        self.config = StoreConfig(block_size=64 * 1024, compression="zstd" if zstd else "none",
                                  max_msgs_per_subject=per_subject)
        self.disk = OsDisk(self.root, shadow=True)
        self.store = FileStore.open(self.disk, self.config)
        self.model = MemStore(self.config)
        self.synced: dict[int, tuple[str, bytes, bytes]] = {}
        self.synced_last = 0
        self.written: dict[int, set[tuple[str, bytes, bytes]]] = {}
        self.clock = 0

    def _both(self, name: str, *args):
        outcomes = []
        for store in (self.store, self.model):
            try:
                outcomes.append(("ok", getattr(store, name)(*args)))
            except JsraftError as error:
                outcomes.append(("error", type(error), error.err_code))
        assert outcomes[0] == outcomes[1], f"{name}{args}: {outcomes}"

    @rule(batch=st.lists(st.tuples(st.sampled_from(SUBJECTS), st.binary(min_size=0, max_size=600)),
                         min_size=1, max_size=40))
    def append(self, batch) -> None:
        first = self.model.state().last_seq + 1
        msgs = []
        for offset, (subject, payload) in enumerate(batch):
            self.clock += 1
            msgs.append((first + offset, subject, b"", payload, self.clock))
            self.written.setdefault(first + offset, set()).add((subject, b"", payload))
        self._both("append_batch", msgs)

    @rule(back=st.integers(0, 30))
    def delete(self, back: int) -> None:
        self._both("delete", max(self.model.state().last_seq - back, 1))

    @rule(subject=st.sampled_from([None, "a", "b.>"]), keep=st.sampled_from([None, 1, 5]))
    def purge(self, subject, keep) -> None:
        self._both("purge", subject, None, keep)

    @rule(ahead=st.integers(0, 20))
    def compact(self, ahead: int) -> None:
        self._both("compact", max(self.model.state().first_seq, 1) + ahead)

    @rule()
    def sync(self) -> None:
        self.store.sync()
        self.synced = _live(self.model)
        self.synced_last = self.model.state().last_seq

    @rule()
    def reopen(self) -> None:
        self.store.close()
        self.store = FileStore.open(OsDisk(self.root, shadow=True), self.config)
        self.synced = _live(self.model)
        self.synced_last = self.model.state().last_seq

    @rule(mode=st.sampled_from(["drop", "torn", "pages"]), seed=st.integers(0, 2**16))
    def cut_power(self, mode: str, seed: int) -> None:
        self.store.files.abandon()
        power_cut(self.root, mode, seed)
        self.store = FileStore.open(OsDisk(self.root, shadow=True), self.config)
        damaged = [f for f in self.store.faults() if f.first <= self.synced_last]
        assert not damaged, f"synced sequences reported damaged after a {mode} cut: {damaged}"
        served = _live(self.store)
        still_live = _live(self.model)
        for seq, message in self.synced.items():
            if seq in still_live:
                assert served.get(seq) == message, f"synced seq {seq} lost or changed by a {mode} cut"
        for seq, message in served.items():
            assert message in self.written.get(seq, set()), f"seq {seq} served bytes nobody wrote"
        self._realign()

    def _realign(self) -> None:
        state = self.store.state()
        low = max(state.first_seq - 1, 0)
        if state.last_seq > self.synced_last >= low:
            self.store.truncate(self.synced_last)
        assert not self.store.faults(), "faults remain above the synced point after cutting back"
        # Opening applies no limits (a stream's replay does that); a caller without a log applies them.
        self.store.update_config(self.config)
        state = self.store.state()
        unlimited = StoreConfig(name=self.config.name)
        model = MemStore(unlimited)
        if state.first_seq > 1:
            model.compact(state.first_seq)
        elif state.first_seq == 1 and state.last_seq == 0:
            model.purge()  # an empty store that was purged: no longer brand new (first_seq 1)
        served = _live(self.store)
        for seq in range(max(state.first_seq, 1), state.last_seq + 1):
            if seq in served:
                subject, headers, payload = served[seq]
                model.append(seq, subject, headers, payload, self.store.load(seq).timestamp_ns)
            else:
                model.skip(seq)
        model.update_config(self.config)
        self.model = model
        self.synced = served
        self.synced_last = state.last_seq

    @invariant()
    def agree(self) -> None:
        if getattr(self, "store", None) is None:
            return
        assert self.store.state() == self.model.state()
        assert self.store.digest_ranges() == self.model.digest_ranges()

    def teardown(self) -> None:
        if getattr(self, "store", None) is not None:
            self.store.close()


def test_filestore_survives_power_cuts_against_memstore_model(tmp_path_factory) -> None:
    counter = iter(range(10**9))

    class Machine(PowerCutMachine):
        def __init__(self) -> None:
            type(self).root = str(tmp_path_factory.mktemp("cut") / f"s{next(counter)}")
            super().__init__()

    run_state_machine_as_test(Machine, settings=settings(
        max_examples=40, stateful_step_count=30, deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]))
