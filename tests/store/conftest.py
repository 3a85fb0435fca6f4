"""Fixtures for the one `StreamStore` behaviour suite, run on every store kind.

Method: each test asks for `make_store` (and, to check persistence, `reopen`); both come from a
`StoreKit` parametrized over `STORE_KINDS`, so every test runs once per store. `FileStore` is imported
lazily inside the kit: while it does not import, its parameter errors and the `mem` parameter still
runs (`pytest tests/store -k mem`). The file kind is never skipped.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from jsraft.errors import StoreClosed
from jsraft.store.base import StoreConfig, StreamStore
from jsraft.store.memstore import MemStore

# "file-bg": a FileStore whose block rolls sync on the store-roll thread, as in the running node
# (store/fs_append.py invariant 3): the whole suite holds for it too.
STORE_KINDS = ["mem", "file", "file-bg"]


def as_config(config: StoreConfig | dict | None) -> StoreConfig | None:
    """Accept a `StoreConfig`, a JSON-shaped dict (decoded strictly) or None (the default config)."""
    if isinstance(config, dict):
        return StoreConfig.from_dict(config)
    return config


class StoreKit:
    """Makes fresh stores of one kind and reopens them; closes whatever it opened at teardown."""

    def __init__(self, kind: str, tmp_path: Path) -> None:
        self.kind = kind
        self._tmp_path = tmp_path
        self._counter = itertools.count()
        self._paths: dict[int, Path] = {}
        self._opened: list[StreamStore] = []

    @property
    def can_reopen(self) -> bool:
        """False for `mem`: reopening a memory store returns the same object."""
        return self.kind != "mem"

    def make(self, config: StoreConfig | dict | None = None) -> StreamStore:
        """A new, empty store (each call gets its own directory for `file`)."""
        config = as_config(config)
        if self.kind == "mem":
            store: StreamStore = MemStore(config)
        else:
            number = next(self._counter)
            path = self._tmp_path / ("s" if number == 0 else f"s{number}")
            store = self._open_file(path, config)
            self._paths[id(store)] = path
        self._opened.append(store)
        return store

    def reopen(self, store: StreamStore) -> StreamStore:
        """Close `store` and open its directory again (file); the same store (mem)."""
        if self.kind == "mem":
            return store
        path = self._paths.pop(id(store))
        config = store.config
        store.close()
        reopened = self._open_file(path, config)
        self._paths[id(reopened)] = path
        self._opened.append(reopened)
        return reopened

    def _open_file(self, path: Path, config: StoreConfig | None) -> StreamStore:
        # Imported here, not at module level, so the mem parameter runs while FileStore is being written.
        from jsraft.disk import OsDisk
        from jsraft.runtime.workers import store_jobs
        from jsraft.store.filestore import FileStore

        return FileStore.open(OsDisk(str(path)), config,
                              background=store_jobs().submit if self.kind == "file-bg" else None)

    def close_all(self) -> None:
        for store in self._opened:
            try:
                store.close()
            except StoreClosed:
                pass


@pytest.fixture(params=STORE_KINDS)
def store_kit(request: pytest.FixtureRequest, tmp_path: Path):
    kit = StoreKit(request.param, tmp_path)
    yield kit
    kit.close_all()


@pytest.fixture
def make_store(store_kit: StoreKit):
    """`make_store(config=None)`: a fresh empty store; config is a `StoreConfig` or a JSON-shaped dict."""
    return store_kit.make


@pytest.fixture
def reopen(store_kit: StoreKit):
    """`reopen(store)`: for file, close and reopen the same directory; for mem, the same store."""
    return store_kit.reopen
