"""Fixtures for the stream tests: `maker` builds stores of one kind, parametrized over memory and file.

Method: a test that takes `maker` runs once per store kind (`mem`, `file` on OsDisk in tmp_path), so the
state machine is checked on both stores by the same code; `mem_maker` is for tests whose subject does not
depend on the store (the leader's decisions, the wire formats).
"""

from __future__ import annotations

import pytest
from stream_kit import STORE_KINDS, StoreMaker


@pytest.fixture(params=STORE_KINDS)
def maker(request: pytest.FixtureRequest, tmp_path):
    kit = StoreMaker(request.param, tmp_path)
    yield kit
    kit.close_all()


@pytest.fixture
def mem_maker(tmp_path):
    kit = StoreMaker("mem", tmp_path)
    yield kit
    kit.close_all()


@pytest.fixture
def file_maker(tmp_path):
    kit = StoreMaker("file", tmp_path)
    yield kit
    kit.close_all()
