"""The scripted JetStream API conversation of the differential oracle (`test_oracle.py`), and the code that
plays it against a server and compares two servers' answers.

Method: every step is one `nc.request` from nats-py — a raw `$JS.API.*` request with a JSON (or
deliberately broken) body, or a publish on a stream subject with headers, whose reply is the PubAck.
The same steps, in the same order, go to each server on a fresh store; the answers are JSON-decoded,
stripped of what must differ between two servers (`normalize`: timestamps and cluster info removed, the
server version masked), and compared field by field (`diff`), giving `(step, path, nats_value, jsraft_value)`.
`MISSING` stands for a field one side does not send.
"""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import attrs

API = "$JS.API"
REQUEST_TIMEOUT_S = 10.0


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


@attrs.frozen
class Step:
    name: str
    subject: str
    body: Any = None  # dict/list: sent as JSON; bytes: sent as is; None: empty payload
    headers: dict[str, str] | None = None

    def payload(self) -> bytes:
        if self.body is None:
            return b""
        if isinstance(self.body, bytes):
            return self.body
        return json.dumps(self.body).encode()


def api(name: str, subject: str, body: Any = None) -> Step:
    return Step(name, f"{API}.{subject}", body)


def pub(name: str, subject: str, data: bytes, **headers: str) -> Step:
    return Step(name, subject, data, {key.replace("_", "-"): value for key, value in headers.items()} or None)


LIMITS = {
    "name": "ORC", "description": "oracle stream", "subjects": ["orc.>"], "retention": "limits",
    "max_consumers": -1, "max_msgs": 1000, "max_bytes": 1 << 20, "max_age": 3_600_000_000_000,
    "max_msgs_per_subject": 100, "max_msg_size": 512, "discard": "old", "storage": "file", "num_replicas": 1,
    "duplicate_window": 60_000_000_000, "deny_delete": False, "deny_purge": False, "allow_rollup_hdrs": True,
}

STEPS: list[Step] = [
    # --- stream admin ---------------------------------------------------------------------------------
    api("create_defaults", "STREAM.CREATE.DEF", {"name": "DEF"}),
    api("create_limits", "STREAM.CREATE.ORC", LIMITS),
    api("create_limits_again", "STREAM.CREATE.ORC", LIMITS),
    api("create_conflicting", "STREAM.CREATE.ORC", {**LIMITS, "max_msgs": 5}),
    api("create_overlap", "STREAM.CREATE.OVER", {"name": "OVER", "subjects": ["orc.a"]}),
    api("info", "STREAM.INFO.ORC"),
    api("update", "STREAM.UPDATE.ORC", {**LIMITS, "max_msgs": 500, "description": "updated"}),
    api("update_storage", "STREAM.UPDATE.ORC", {**LIMITS, "storage": "memory"}),
    api("update_missing", "STREAM.UPDATE.NOPE", {"name": "NOPE", "subjects": ["nope"]}),
    api("names", "STREAM.NAMES"),
    api("names_subject", "STREAM.NAMES", {"subject": "orc.x"}),
    api("names_offset", "STREAM.NAMES", {"offset": 1}),
    api("names_offset_past_end", "STREAM.NAMES", {"offset": 5}),
    api("names_subject_none", "STREAM.NAMES", {"subject": "nobody.*"}),
    api("list", "STREAM.LIST"),
    # --- publishes ------------------------------------------------------------------------------------
    pub("pub_msgid", "orc.a", b"one", Nats_Msg_Id="m1"),
    pub("pub_msgid_dup", "orc.a", b"one again", Nats_Msg_Id="m1"),
    pub("pub_headers", "orc.b", b"two", X_Custom="v1", Nats_Msg_Id="m2"),
    pub("pub_plain", "orc.c.deep", b"three"),
    pub("pub_expected_last_seq_bad", "orc.a", b"x", Nats_Expected_Last_Sequence="99"),
    pub("pub_expected_last_seq_ok", "orc.a", b"four", Nats_Expected_Last_Sequence="3"),
    pub("pub_expected_stream_bad", "orc.a", b"x", Nats_Expected_Stream="OTHER"),
    pub("pub_expected_stream_ok", "orc.b", b"five", Nats_Expected_Stream="ORC"),
    pub("pub_expected_subject_seq_bad", "orc.a", b"x", Nats_Expected_Last_Subject_Sequence="1"),
    pub("pub_expected_subject_seq_ok", "orc.a", b"six", Nats_Expected_Last_Subject_Sequence="4"),
    pub("pub_expected_msg_id_bad", "orc.a", b"x", Nats_Expected_Last_Msg_Id="nope"),
    pub("pub_too_big", "orc.a", b"z" * 600),
    pub("pub_empty", "orc.e", b""),
    api("info_after_publishes", "STREAM.INFO.ORC"),
    api("info_subjects", "STREAM.INFO.ORC", {"subjects_filter": ">"}),
    # --- message get / delete -------------------------------------------------------------------------
    api("msg_get_seq", "STREAM.MSG.GET.ORC", {"seq": 1}),
    api("msg_get_headers", "STREAM.MSG.GET.ORC", {"seq": 2}),
    api("msg_get_last_by_subj", "STREAM.MSG.GET.ORC", {"last_by_subj": "orc.a"}),
    api("msg_get_next_by_subj", "STREAM.MSG.GET.ORC", {"seq": 2, "next_by_subj": "orc.a"}),
    api("msg_get_empty_payload", "STREAM.MSG.GET.ORC", {"last_by_subj": "orc.e"}),
    api("msg_get_missing_seq", "STREAM.MSG.GET.ORC", {"seq": 999}),
    api("msg_get_missing_subject", "STREAM.MSG.GET.ORC", {"last_by_subj": "orc.zzz"}),
    api("msg_get_conflicting", "STREAM.MSG.GET.ORC", {"seq": 1, "last_by_subj": "orc.a"}),
    api("msg_get_empty_body", "STREAM.MSG.GET.ORC"),
    api("msg_delete", "STREAM.MSG.DELETE.ORC", {"seq": 3}),
    api("msg_delete_again", "STREAM.MSG.DELETE.ORC", {"seq": 3}),
    api("msg_delete_no_erase", "STREAM.MSG.DELETE.ORC", {"seq": 5, "no_erase": True}),
    api("msg_get_deleted", "STREAM.MSG.GET.ORC", {"seq": 3}),
    api("msg_delete_past_end", "STREAM.MSG.DELETE.ORC", {"seq": 999}),
    api("msg_delete_zero", "STREAM.MSG.DELETE.ORC", {"seq": 0}),
    api("info_after_delete", "STREAM.INFO.ORC"),
    # --- purge ----------------------------------------------------------------------------------------
    api("purge_filter", "STREAM.PURGE.ORC", {"filter": "orc.a"}),
    api("purge_filter_keep", "STREAM.PURGE.ORC", {"filter": "orc.b", "keep": 1}),
    api("info_after_purge", "STREAM.INFO.ORC"),
    api("purge_seq_and_keep", "STREAM.PURGE.ORC", {"seq": 3, "keep": 1}),
    api("purge_all", "STREAM.PURGE.ORC"),
    pub("pub_after_purge", "orc.a", b"seven"),
    api("msg_delete_below_first", "STREAM.MSG.DELETE.ORC", {"seq": 1}),
    api("info_after_purge_all", "STREAM.INFO.ORC"),
    # --- errors ---------------------------------------------------------------------------------------
    api("create_bad_json", "STREAM.CREATE.BAD", b'{"name": "BAD", '),
    api("create_not_object", "STREAM.CREATE.BAD", b"[1, 2]"),
    api("create_unknown_field", "STREAM.CREATE.BAD", {"name": "BAD", "bogus_field": 1}),
    api("create_wrong_type", "STREAM.CREATE.BAD", {"name": "BAD", "max_msgs": "ten"}),
    api("create_name_mismatch", "STREAM.CREATE.BAD", {"name": "OTHER"}),
    api("create_no_name", "STREAM.CREATE.BAD", {"subjects": ["bad"]}),
    api("create_bad_storage", "STREAM.CREATE.BAD", {"name": "BAD", "storage": "tape"}),
    api("create_bad_subject", "STREAM.CREATE.BAD", {"name": "BAD", "subjects": ["a..b"]}),
    api("create_negative_replicas", "STREAM.CREATE.BAD", {"name": "BAD", "num_replicas": -1}),
    api("create_too_many_replicas", "STREAM.CREATE.BAD", {"name": "BAD", "num_replicas": 6}),
    api("create_repeated_subject", "STREAM.CREATE.BAD", {"name": "BAD", "subjects": ["a", "b", "a"]}),
    api("create_self_overlap", "STREAM.CREATE.BAD", {"name": "BAD", "subjects": ["a.>", "a.b"]}),
    api("info_not_found", "STREAM.INFO.NOPE"),
    api("info_bad_json", "STREAM.INFO.ORC", b"{nope"),
    api("names_bad_json", "STREAM.NAMES", b"{nope"),
    api("list_bad_json", "STREAM.LIST", b"{nope"),
    api("msg_get_not_found", "STREAM.MSG.GET.NOPE", {"seq": 1}),
    api("msg_get_bad_json", "STREAM.MSG.GET.ORC", b"{nope"),
    api("msg_delete_not_found", "STREAM.MSG.DELETE.NOPE", {"seq": 1}),
    api("purge_not_found", "STREAM.PURGE.NOPE"),
    api("purge_unknown_field", "STREAM.PURGE.ORC", {"filter": "orc.a", "nope": 1}),
    api("update_name_mismatch", "STREAM.UPDATE.ORC", {**LIMITS, "name": "OTHER"}),
    api("delete_with_body", "STREAM.DELETE.ORC", {"nope": 1}),
    api("delete_not_found", "STREAM.DELETE.NOPE"),
    # --- delete ---------------------------------------------------------------------------------------
    api("delete", "STREAM.DELETE.ORC"),
    api("delete_defaults", "STREAM.DELETE.DEF"),
    api("info_deleted", "STREAM.INFO.ORC"),
    api("names_after_delete", "STREAM.NAMES"),
    api("account_info", "INFO"),
]


# --- Playing the script ---------------------------------------------------------------------------------

async def play(url: str, steps: list[Step] = STEPS) -> dict[str, Any]:
    """`{step name: decoded answer}`; an answer that is not JSON is kept as `{"_raw": text}`, no answer
    at all as `{"_no_answer": "<error class>"}`."""
    import nats
    import nats.errors

    nc = await nats.connect(url, connect_timeout=5, allow_reconnect=False)
    answers: dict[str, Any] = {}
    try:
        for step in steps:
            try:
                msg = await nc.request(step.subject, step.payload(), timeout=REQUEST_TIMEOUT_S,
                                       headers=step.headers)
            except (nats.errors.NoRespondersError, nats.errors.TimeoutError, asyncio.TimeoutError) as error:
                answers[step.name] = {"_no_answer": type(error).__name__}
                continue
            try:
                answers[step.name] = json.loads(msg.data)
            except ValueError:
                answers[step.name] = {"_raw": msg.data.decode(errors="replace")}
    finally:
        await nc.close()
    return answers


# --- Normalizing and comparing ----------------------------------------------------------------------------

# Removed before comparing: values that differ between any two servers, or any two runs.
IGNORED_KEYS = {
    "ts": "response timestamp",
    "created": "stream creation time",
    "first_ts": "time of the first message",
    "last_ts": "time of the last message",
    "time": "a stored message's time",
    "cluster": "cluster info: server and cluster names, peers (one nats-server vs one jsraft node)",
}
# Replaced by a placeholder before comparing: the value differs between servers, but whether the key is
# there at all (INFO serves it, LIST does not) is compared.
MASKED_METADATA = {
    "_nats.ver": "the server's version",
}


def normalize(value: Any) -> Any:
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if key in IGNORED_KEYS:
                continue
            if key == "metadata" and isinstance(item, dict):
                item = {k: f"<{MASKED_METADATA[k]}>" if k in MASKED_METADATA else v for k, v in item.items()}
            if key == "hdrs" and isinstance(item, str):  # decoded, so a difference reads as text
                item = base64.b64decode(item).decode(errors="replace")
            out[key] = normalize(item)
        return out
    if isinstance(value, list):
        return [normalize(item) for item in value]
    return value


def diff(left: Any, right: Any, path: str = "") -> list[tuple[str, Any, Any]]:
    """Every `(path, left value, right value)` where the two differ; dict paths join keys with '.',
    list items are `[i]` (lists of different lengths differ as a whole)."""
    if isinstance(left, dict) and isinstance(right, dict):
        found = []
        for key in sorted(left.keys() | right.keys()):
            sub = f"{path}.{key}" if path else key
            found += diff(left.get(key, MISSING), right.get(key, MISSING), sub)
        return found
    if isinstance(left, list) and isinstance(right, list) and len(left) == len(right):
        found = []
        for i, (a, b) in enumerate(zip(left, right)):
            found += diff(a, b, f"{path}[{i}]")
        return found
    if left is MISSING and right is MISSING:
        return []
    if type(left) is type(right) and left == right:
        return []
    return [(path, left, right)]


def compare(nats_answers: dict[str, Any], jsraft_answers: dict[str, Any],
            steps: list[Step] = STEPS) -> list[tuple[str, str, Any, Any]]:
    found = []
    for step in steps:
        for path, a, b in diff(normalize(nats_answers.get(step.name, MISSING)),
                               normalize(jsraft_answers.get(step.name, MISSING))):
            found.append((step.name, path, a, b))
    return found
