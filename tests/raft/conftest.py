"""Raft test options: `pytest tests/raft --rewrite` regenerates the golden output of the scenario scripts."""

from __future__ import annotations


def pytest_addoption(parser):
    parser.addoption("--rewrite", action="store_true", default=False,
                     help="rewrite tests/raft/scenarios/*.txt with the actual output")
