"""Fixtures for the WAL tests: the same test runs on the real disk and on the simulated one."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from jsraft.disk import Disk, OsDisk
from jsraft.testing.simdisk import SimDisk


@pytest.fixture(params=["os", "sim"])
def disk(request: pytest.FixtureRequest, tmp_path: Path) -> Disk:
    """A group's directory (`meta/`) on a fresh `OsDisk` or `SimDisk`."""
    root: Disk = OsDisk(str(tmp_path / "data")) if request.param == "os" else SimDisk(random.Random(7))
    return root.sub("meta")
