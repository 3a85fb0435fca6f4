"""Scenario scripts for the Raft core, with golden output (etcd datadriven style).

Method: each `scenarios/*.txt` is run by `raft_scenario.run_script` against the real `RaftNode` on the
in-memory network of `raft_network`; the output must equal the file. `pytest tests/raft --rewrite`
writes the actual output back instead (review the diff before committing it).
"""

from __future__ import annotations

import pathlib

import pytest
from raft_scenario import run_script

SCENARIOS = pathlib.Path(__file__).resolve().parent / "scenarios"


@pytest.mark.parametrize("path", sorted(SCENARIOS.glob("*.txt")), ids=lambda p: p.stem)
def test_scenario(path: pathlib.Path, request: pytest.FixtureRequest) -> None:
    expected = path.read_text()
    actual = run_script(expected)
    if request.config.getoption("--rewrite", default=False):
        if actual != expected:
            path.write_text(actual)
        return
    assert actual == expected, f"{path.name} differs; run `pytest tests/raft --rewrite` and review the diff"
