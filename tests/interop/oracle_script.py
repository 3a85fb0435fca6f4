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

from oracle_pull import message_answer, pull

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
    kind: str = "json"  # "json": the answer is JSON; "message": a delivered message or status (MSG.NEXT);
    #                     "ack": the body goes to the reply subject of the last "message" step (a double ack)

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


def consumer(name: str, subject: str, config: Any, stream: str | None = None, **request: Any) -> Step:
    """A consumer create request; `stream_name` is the subject's stream unless given."""
    stream_name = subject.split(".")[2] if subject.startswith("CONSUMER.CREATE.") else subject.split(".")[3]
    return api(name, subject, {"stream_name": stream if stream is not None else stream_name, "config": config,
                               **request})


def next_msg(name: str, stream: str, consumer_name: str) -> Step:  # one pull request, no_wait
    return Step(name, f"{API}.CONSUMER.MSG.NEXT.{stream}.{consumer_name}", {"batch": 1, "no_wait": True},
                kind="message")


def ack(name: str, body: bytes = b"+ACK") -> Step:
    return Step(name, "", body, kind="ack")


LIMITS = {
    "name": "ORC", "description": "oracle stream", "subjects": ["orc.>"], "retention": "limits",
    "max_consumers": -1, "max_msgs": 1000, "max_bytes": 1 << 20, "max_age": 3_600_000_000_000,
    "max_msgs_per_subject": 100, "max_msg_size": 512, "discard": "old", "storage": "file", "num_replicas": 1,
    "duplicate_window": 60_000_000_000, "deny_delete": False, "deny_purge": False, "allow_rollup_hdrs": True,
}

HOUR_NS = 3_600_000_000_000
EXPLICIT_A = {"durable_name": "D1", "ack_policy": "explicit", "filter_subject": "con.a"}

# Consumers, on streams of their own (CON, WQ) created and deleted here, and one unnamed ephemeral on DEF.
CONSUMER_STEPS: list[Step] = [
    api("c_stream", "STREAM.CREATE.CON", {"name": "CON", "subjects": ["con.>"]}),
    api("c_stream_wq", "STREAM.CREATE.WQ", {"name": "WQ", "subjects": ["wq.>"], "retention": "workqueue"}),
    pub("c_pub_1", "con.a", b"a1"),
    pub("c_pub_2", "con.b", b"b1", X_Custom="v1"),
    pub("c_pub_3", "con.a", b"a2"),
    pub("c_pub_4", "con.c", b"c1"),
    # --- create -----------------------------------------------------------------------------------------
    consumer("c_create_durable", "CONSUMER.CREATE.CON.D1", EXPLICIT_A),
    consumer("c_create_durable_again", "CONSUMER.CREATE.CON.D1", EXPLICIT_A),
    consumer("c_create_filters", "CONSUMER.CREATE.CON.D2",
             {"durable_name": "D2", "ack_policy": "explicit", "filter_subjects": ["con.a", "con.b"],
              "description": "two filters", "max_ack_pending": 10, "metadata": {"k": "v"}}),
    consumer("c_create_named", "CONSUMER.CREATE.CON.N1",
             {"name": "N1", "ack_policy": "explicit", "inactive_threshold": HOUR_NS}),
    consumer("c_create_legacy_durable", "CONSUMER.DURABLE.CREATE.CON.LD",
             {"durable_name": "LD", "ack_policy": "all", "deliver_policy": "last", "max_deliver": 3}),
    consumer("c_create_by_seq", "CONSUMER.CREATE.CON.S1",
             {"durable_name": "S1", "deliver_policy": "by_start_sequence", "opt_start_seq": 3,
              "ack_policy": "none"}),
    consumer("c_create_filter_in_subject", "CONSUMER.CREATE.CON.F1.con.c",
             {"durable_name": "F1", "filter_subject": "con.c"}),
    consumer("c_create_action_create_exists", "CONSUMER.CREATE.CON.D1", {**EXPLICIT_A, "max_deliver": 5},
             action="create"),
    consumer("c_create_update_missing", "CONSUMER.CREATE.CON.U1", {"durable_name": "U1"}, action="update"),
    consumer("c_create_update", "CONSUMER.CREATE.CON.D1", {**EXPLICIT_A, "max_deliver": 5}, action="update"),
    consumer("c_create_update_bad", "CONSUMER.CREATE.CON.D1", {**EXPLICIT_A, "ack_policy": "all"}),
    consumer("c_wq_first", "CONSUMER.CREATE.WQ.W1", {"durable_name": "W1", "ack_policy": "explicit"}),
    consumer("c_wq_second", "CONSUMER.CREATE.WQ.W2", {"durable_name": "W2", "ack_policy": "explicit"}),
    consumer("c_wq_ack_none", "CONSUMER.CREATE.WQ.W3",
             {"durable_name": "W3", "ack_policy": "none", "filter_subject": "wq.x"}),
    # --- create errors ----------------------------------------------------------------------------------
    api("c_create_bad_json", "CONSUMER.CREATE.CON.E0", b'{"stream_name": "CON", '),
    consumer("c_create_unknown_field", "CONSUMER.CREATE.CON.E1", {"durable_name": "E1", "bogus_field": 1}),
    consumer("c_create_unknown_request_field", "CONSUMER.CREATE.CON.E1", {"durable_name": "E1"}, bogus=1),
    consumer("c_create_ack_wait_negative", "CONSUMER.CREATE.CON.E2", {"durable_name": "E2", "ack_wait": -1}),
    consumer("c_create_start_seq_missing", "CONSUMER.CREATE.CON.E3",
             {"durable_name": "E3", "deliver_policy": "by_start_sequence"}),
    consumer("c_create_stream_not_found", "CONSUMER.CREATE.NOPE.E4", {"durable_name": "E4"}),
    consumer("c_create_stream_name_mismatch", "CONSUMER.CREATE.CON.E5", {"durable_name": "E5"}, stream="OTHER"),
    consumer("c_create_name_mismatch", "CONSUMER.CREATE.CON.E6", {"durable_name": "OTHER"}),
    consumer("c_create_ephemeral_durable", "CONSUMER.CREATE.CON", {"durable_name": "E7"}),
    consumer("c_create_legacy_no_durable", "CONSUMER.DURABLE.CREATE.CON.E8", {"ack_policy": "explicit"}),
    consumer("c_create_filter_mismatch", "CONSUMER.CREATE.CON.E9.con.a", {"durable_name": "E9"}),
    consumer("c_create_max_waiting_negative", "CONSUMER.CREATE.CON.E10",
             {"durable_name": "E10", "max_waiting": -1}),
    consumer("c_create_push", "CONSUMER.CREATE.CON.P1", {"durable_name": "P1", "deliver_subject": "push.out"}),
    api("c_delete_push", "CONSUMER.DELETE.CON.P1"),  # so that the push difference ends here
    # --- info, names, list ------------------------------------------------------------------------------
    api("c_info", "CONSUMER.INFO.CON.D1"),
    api("c_info_not_found", "CONSUMER.INFO.CON.NOPE"),
    api("c_info_stream_not_found", "CONSUMER.INFO.NOPE.D1"),
    api("c_names", "CONSUMER.NAMES.CON"),
    api("c_names_offset", "CONSUMER.NAMES.CON", {"offset": 2}),
    api("c_names_offset_past_end", "CONSUMER.NAMES.CON", {"offset": 50}),
    api("c_names_stream_not_found", "CONSUMER.NAMES.NOPE"),
    api("c_list", "CONSUMER.LIST.CON"),
    api("c_list_offset", "CONSUMER.LIST.CON", {"offset": 4}),
    api("c_list_stream_not_found", "CONSUMER.LIST.NOPE"),
    # --- pulls and acks ---------------------------------------------------------------------------------
    next_msg("c_next_1", "CON", "D1"),
    ack("c_ack_1"),
    api("c_info_after_ack", "CONSUMER.INFO.CON.D1"),
    next_msg("c_next_2", "CON", "D1"),
    api("c_info_ack_pending", "CONSUMER.INFO.CON.D1"),
    next_msg("c_next_none", "CON", "D1"),
    next_msg("c_next_filters", "CON", "D2"),
    next_msg("c_next_filters_2", "CON", "D2"),
    ack("c_ack_filters_2"),
    api("c_info_filters", "CONSUMER.INFO.CON.D2"),
    next_msg("c_next_by_seq", "CON", "S1"),
    api("c_info_by_seq", "CONSUMER.INFO.CON.S1"),
    next_msg("c_next_last", "CON", "LD"),
    ack("c_nak_last", b"-NAK"),
    api("c_info_after_nak", "CONSUMER.INFO.CON.LD"),
    api("c_stream_info", "STREAM.INFO.CON"),
    api("account_info_consumers", "INFO"),
    # --- an unnamed ephemeral (its generated name is masked) --------------------------------------------
    consumer("c_create_ephemeral", "CONSUMER.CREATE.DEF", {"ack_policy": "explicit"}),
    consumer("c_create_ephemeral_legacy_filter", "CONSUMER.CREATE.DEF", {"filter_subject": "DEF"}),
    # --- delete -----------------------------------------------------------------------------------------
    api("c_delete", "CONSUMER.DELETE.CON.N1"),
    api("c_delete_not_found", "CONSUMER.DELETE.CON.N1"),
    api("c_delete_stream_not_found", "CONSUMER.DELETE.NOPE.N1"),
    api("c_names_after_delete", "CONSUMER.NAMES.CON"),
    api("c_stream_delete", "STREAM.DELETE.CON"),
    api("c_stream_delete_wq", "STREAM.DELETE.WQ"),
]

FAR_FUTURE = "2099-01-01T00:00:00Z"

# Pause / resume, leader stepdown (one server: not clustered) and sampling, on a stream of their own (CTL).
CONTROL_STEPS: list[Step] = [
    api("k_stream", "STREAM.CREATE.CTL", {"name": "CTL", "subjects": ["ctl.>"]}),
    pub("k_pub", "ctl.a", b"k1"),
    consumer("k_create", "CONSUMER.CREATE.CTL.K", {"durable_name": "K", "ack_policy": "explicit"}),
    consumer("k_create_paused", "CONSUMER.CREATE.CTL.KP",
             {"durable_name": "KP", "ack_policy": "explicit", "pause_until": FAR_FUTURE}),
    api("k_info_created_paused", "CONSUMER.INFO.CTL.KP"),
    next_msg("k_next_created_paused", "CTL", "KP"),
    api("k_pause", "CONSUMER.PAUSE.CTL.K", {"pause_until": FAR_FUTURE}),
    api("k_info_paused", "CONSUMER.INFO.CTL.K"),
    next_msg("k_next_while_paused", "CTL", "K"),
    api("k_pause_past", "CONSUMER.PAUSE.CTL.K", {"pause_until": "2020-01-01T00:00:00Z"}),
    api("k_info_pause_past", "CONSUMER.INFO.CTL.K"),
    api("k_resume", "CONSUMER.PAUSE.CTL.K", {}),
    api("k_resume_empty", "CONSUMER.PAUSE.CTL.K"),
    api("k_info_resumed", "CONSUMER.INFO.CTL.K"),
    next_msg("k_next_resumed", "CTL", "K"),
    api("k_pause_unknown_field", "CONSUMER.PAUSE.CTL.K", {"bogus": 1}),
    api("k_pause_bad_type", "CONSUMER.PAUSE.CTL.K", {"pause_until": 5}),
    api("k_pause_bad_time", "CONSUMER.PAUSE.CTL.K", {"pause_until": "nope"}),
    api("k_pause_not_found", "CONSUMER.PAUSE.CTL.NOPE"),
    api("k_pause_stream_not_found", "CONSUMER.PAUSE.NOPE.K"),
    api("k_stepdown", "CONSUMER.LEADER.STEPDOWN.CTL.K"),
    api("k_stepdown_not_found", "CONSUMER.LEADER.STEPDOWN.CTL.NOPE"),
    consumer("k_create_sampled", "CONSUMER.CREATE.CTL.KS",
             {"durable_name": "KS", "ack_policy": "explicit", "sample_freq": "50%"}),
    consumer("k_create_sampled_bare", "CONSUMER.CREATE.CTL.KB",
             {"durable_name": "KB", "ack_policy": "explicit", "sample_freq": "30"}),
    consumer("k_create_sampled_bad", "CONSUMER.CREATE.CTL.KX", {"durable_name": "KX", "sample_freq": "x%"}),
    api("k_stream_delete", "STREAM.DELETE.CTL"),
]

# Per-message TTL (ADR-43) on a stream of its own (TTL); a TTL refused on DEF, which does not allow them.
TTL_CONFIG = {"name": "TTL", "subjects": ["ttl.>"], "allow_msg_ttl": True}
TTL_STEPS: list[Step] = [
    api("t_create", "STREAM.CREATE.TTL", TTL_CONFIG),
    pub("t_pub_hour", "ttl.a", b"t1", Nats_TTL="1h"),
    pub("t_pub_seconds", "ttl.b", b"t2", Nats_TTL="90"),
    pub("t_pub_never", "ttl.c", b"t3", Nats_TTL="never"),
    pub("t_pub_zero", "ttl.a", b"x", Nats_TTL="0"),
    pub("t_pub_sub_second", "ttl.a", b"x", Nats_TTL="500ms"),
    pub("t_pub_garbled", "ttl.a", b"x", Nats_TTL="soon"),
    pub("t_pub_disabled", "DEF", b"x", Nats_TTL="5s"),
    api("t_msg_get", "STREAM.MSG.GET.TTL", {"seq": 1}),
    api("t_info", "STREAM.INFO.TTL"),
    api("t_update_disable", "STREAM.UPDATE.TTL", {**TTL_CONFIG, "allow_msg_ttl": False}),
    api("t_create_marker_negative", "STREAM.CREATE.TTLM",
        {"name": "TTLM", "subjects": ["ttlm"], "allow_msg_ttl": True, "subject_delete_marker_ttl": -1}),
    api("t_create_marker_short", "STREAM.CREATE.TTLM",
        {"name": "TTLM", "subjects": ["ttlm"], "allow_msg_ttl": True, "subject_delete_marker_ttl": 500_000_000}),
    api("t_delete", "STREAM.DELETE.TTL"),
]

# Counters (ADR-49, nats-server 2.12) on a stream of their own (CNT); an increment refused on DEF, which is
# not a counter stream.
COUNTER_CONFIG = {"name": "CNT", "subjects": ["cnt.>"], "allow_msg_counter": True}
COUNTER_STEPS: list[Step] = [
    api("n_create", "STREAM.CREATE.CNT", COUNTER_CONFIG),
    pub("n_incr_two", "cnt.a", b"", Nats_Incr="+2"),
    pub("n_incr_minus", "cnt.a", b"", Nats_Incr="-5"),
    pub("n_incr_big", "cnt.a", b"", Nats_Incr="10000000000000000000000000"),
    pub("n_incr_zero_other", "cnt.b", b"", Nats_Incr="0"),
    pub("n_incr_payload", "cnt.a", b"x", Nats_Incr="1"),
    pub("n_incr_garbled", "cnt.a", b"", Nats_Incr="1.5"),
    pub("n_incr_missing", "cnt.a", b""),
    pub("n_incr_expected_stream", "cnt.a", b"", Nats_Incr="1", Nats_Expected_Stream="CNT"),
    pub("n_incr_rollup", "cnt.a", b"", Nats_Incr="1", Nats_Rollup="sub"),
    pub("n_incr_msgid", "cnt.a", b"", Nats_Incr="1", Nats_Msg_Id="n1"),
    pub("n_incr_msgid_dup", "cnt.a", b"", Nats_Incr="1", Nats_Msg_Id="n1"),
    api("n_get_last", "STREAM.MSG.GET.CNT", {"last_by_subj": "cnt.a"}),
    pub("n_incr_disabled", "DEF", b"", Nats_Incr="1"),
    pub("n_incr_garbled_disabled", "DEF", b"", Nats_Incr="x"),
    api("n_create_discard_new", "STREAM.CREATE.CNB", {"name": "CNB", "subjects": ["cnb"], "allow_msg_counter": True,
                                                      "discard": "new"}),
    api("n_create_ttl", "STREAM.CREATE.CNB", {"name": "CNB", "subjects": ["cnb"], "allow_msg_counter": True,
                                              "allow_msg_ttl": True}),
    api("n_create_workqueue", "STREAM.CREATE.CNB", {"name": "CNB", "subjects": ["cnb"], "allow_msg_counter": True,
                                                    "retention": "workqueue"}),
    api("n_update_off", "STREAM.UPDATE.CNT", {**COUNTER_CONFIG, "allow_msg_counter": False}),
    api("n_purge_subject", "STREAM.PURGE.CNT", {"filter": "cnt.a"}),
    pub("n_incr_after_purge", "cnt.a", b"", Nats_Incr="+1"),
    api("n_info", "STREAM.INFO.CNT"),
    api("n_delete", "STREAM.DELETE.CNT"),
]

# Message schedules (ADR-51) on a stream of their own (SCH), with a far-off `@at` (the firing itself is
# tests/interop/test_schedules_cluster.py's); only what nats-server 2.12 and 2.15 answer alike (2.14 added
# `@every`/cron patterns and error 10212).
SCHEDULE_CONFIG = {"name": "SCH", "subjects": ["sch.>"], "allow_msg_schedules": True}
AT_FAR = "@at 2099-01-01T00:00:00Z"
SCHEDULE_STEPS: list[Step] = [
    api("s_create", "STREAM.CREATE.SCH", SCHEDULE_CONFIG),
    pub("s_pub", "sch.a", b"later", Nats_Schedule=AT_FAR, Nats_Schedule_Target="sch.out", X_Kept="1"),
    pub("s_pub_target_missing", "sch.a", b"x", Nats_Schedule=AT_FAR),
    pub("s_pub_target_self", "sch.a", b"x", Nats_Schedule=AT_FAR, Nats_Schedule_Target="sch.a"),
    pub("s_pub_target_outside", "sch.a", b"x", Nats_Schedule=AT_FAR, Nats_Schedule_Target="elsewhere"),
    pub("s_pub_ttl_bad", "sch.a", b"x", Nats_Schedule=AT_FAR, Nats_Schedule_Target="sch.out", Nats_Schedule_TTL="x"),
    pub("s_pub_ttl_disabled", "sch.a", b"x", Nats_Schedule=AT_FAR, Nats_Schedule_Target="sch.out",
        Nats_Schedule_TTL="5s"),
    pub("s_pub_rollup_all", "sch.a", b"x", Nats_Schedule=AT_FAR, Nats_Schedule_Target="sch.out", Nats_Rollup="all"),
    pub("s_pub_pattern_bad", "sch.a", b"x", Nats_Schedule="@at soon", Nats_Schedule_Target="sch.out"),
    pub("s_pub_disabled", "DEF", b"x", Nats_Schedule=AT_FAR, Nats_Schedule_Target="DEF"),
    api("s_get", "STREAM.MSG.GET.SCH", {"seq": 1}),
    api("s_info", "STREAM.INFO.SCH"),
    api("s_update_off", "STREAM.UPDATE.SCH", {**SCHEDULE_CONFIG, "allow_msg_schedules": False}),
    # Go's zero time is no schedule (stream.schedules invariant 5): stored as it is, no rollup added.
    pub("s_pub_zero", "sch.z", b"z", Nats_Schedule="@at 0001-01-01T00:00:00Z"),
    api("s_get_zero", "STREAM.MSG.GET.SCH", {"last_by_subj": "sch.z"}),
    pub("s_pub_comma", "sch.c", b"c", Nats_Schedule="@at 2099-01-01T00:00:00,5Z", Nats_Schedule_Target="sch.out"),
    api("s_create_counter", "STREAM.CREATE.SCB", {"name": "SCB", "subjects": ["scb"], "allow_msg_schedules": True,
                                                   "allow_msg_counter": True}),
    api("s_delete", "STREAM.DELETE.SCH"),
]

# Atomic batch publish (ADR-50) on a stream of their own (ATM), and `persist_mode` (2.12): the answers of
# every staging, commit and refusal.
ATOMIC_CONFIG = {"name": "ATM", "subjects": ["atm.>"], "allow_atomic": True}


def _batch(name: str, subject: str, batch_id: str, seq: str, commit: bool = False, **headers: str) -> Step:
    extra = {"Nats_Batch_Commit": "1"} if commit else {}
    return pub(name, subject, b"b", Nats_Batch_Id=batch_id, Nats_Batch_Sequence=seq, **extra, **headers)


ATOMIC_STEPS: list[Step] = [
    api("b_create", "STREAM.CREATE.ATM", ATOMIC_CONFIG),
    _batch("b_one", "atm.1", "b1", "1"),
    _batch("b_two", "atm.2", "b1", "2", X_Y="z"),
    _batch("b_commit", "atm.3", "b1", "3", commit=True),
    api("b_get_two", "STREAM.MSG.GET.ATM", {"seq": 2}),
    _batch("b_gap_1", "atm.1", "b2", "1"),
    _batch("b_gap_3", "atm.1", "b2", "3"),
    _batch("b_unknown", "atm.1", "b3", "2"),
    _batch("b_too_large", "atm.1", "b3", "1001"),
    pub("b_no_sequence", "atm.1", b"b", Nats_Batch_Id="b3"),
    _batch("b_long_id", "atm.1", "x" * 65, "1"),
    _batch("b_bad_commit_1", "atm.1", "b4", "1"),
    _batch("b_bad_commit", "atm.1", "b4", "2", Nats_Batch_Commit="yes"),
    _batch("b_expect_1", "atm.1", "b5", "1"),
    _batch("b_expect", "atm.1", "b5", "2", commit=True, Nats_Expected_Last_Subject_Sequence="99"),
    _batch("b_last_msg_id_1", "atm.1", "b6", "1", Nats_Expected_Last_Msg_Id="q"),
    _batch("b_last_msg_id", "atm.1", "b6", "2", commit=True),
    _batch("b_dup_1", "atm.1", "b7", "1", Nats_Msg_Id="d"),
    _batch("b_dup", "atm.1", "b7", "2", commit=True, Nats_Msg_Id="d"),
    _batch("b_single", "atm.9", "b8", "1", commit=True, Nats_Msg_Id="e"),
    _batch("b_single_dup", "atm.9", "b9", "1", commit=True, Nats_Msg_Id="e"),
    api("b_info", "STREAM.INFO.ATM"),
    _batch("b_disabled", "DEF", "b1", "1"),
    api("b_delete", "STREAM.DELETE.ATM"),
    api("p_create_async", "STREAM.CREATE.PAS", {"name": "PAS", "subjects": ["pas"], "persist_mode": "async"}),
    api("p_create_default", "STREAM.CREATE.PDF", {"name": "PDF", "subjects": ["pdf"], "persist_mode": "default"}),
    api("p_create_memory", "STREAM.CREATE.PMM", {"name": "PMM", "subjects": ["pmm"], "persist_mode": "async",
                                                 "storage": "memory"}),
    api("p_create_atomic", "STREAM.CREATE.PMM", {"name": "PMM", "subjects": ["pmm"], "persist_mode": "async",
                                                 "allow_atomic": True}),
    api("p_create_bad", "STREAM.CREATE.PMM", {"name": "PMM", "subjects": ["pmm"], "persist_mode": "sometimes"}),
    pub("p_pub_async", "pas", b"p"),
    api("p_delete_async", "STREAM.DELETE.PAS"),
    api("p_delete_default", "STREAM.DELETE.PDF"),
]

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
    *CONSUMER_STEPS,
    *CONTROL_STEPS,
    *TTL_STEPS,
    *COUNTER_STEPS,
    *SCHEDULE_STEPS,
    *ATOMIC_STEPS,
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
    # nats-py's object store asks for `$O.<bucket>.M.` (an empty name): no message, not a bad request.
    api("msg_get_last_by_subj_empty_token", "STREAM.MSG.GET.ORC", {"last_by_subj": "orc."}),
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
    last_reply = ""
    try:
        for step in steps:
            subject = last_reply if step.kind == "ack" else step.subject
            if not subject:
                answers[step.name] = {"_no_answer": "nothing to ack"}
                continue
            try:
                if step.kind == "message":  # delivered under the stream's subject: not nc.request's inbox mux
                    msg = await pull(nc, subject, step.payload())
                else:
                    msg = await nc.request(subject, step.payload(), timeout=REQUEST_TIMEOUT_S, headers=step.headers)
            except (nats.errors.NoRespondersError, nats.errors.TimeoutError, asyncio.TimeoutError) as error:
                answers[step.name] = {"_no_answer": type(error).__name__}
                continue
            if step.kind == "message":
                last_reply = msg.reply or last_reply
                answers[step.name] = message_answer(msg.subject, msg.reply, msg.headers, msg.data)
                continue
            try:
                # An empty answer: a double ack's, or an atomic batch message staged (ADR-50).
                answers[step.name] = json.loads(msg.data) if msg.data else {"empty": True}
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
    "last_active": "a consumer's last delivery or ack time",
    "pause_remaining": "the time left until a paused consumer resumes (depends on when it is asked)",
    "cluster": "cluster info: server and cluster names, peers (one nats-server vs one jsraft node)",
}
# Replaced by a placeholder before comparing: the value differs between servers, but whether the key is
# there at all (INFO serves it, LIST does not) is compared.
MASKED_METADATA = {
    "_nats.ver": "the server's version",
}


# Steps creating an unnamed ephemeral: the server generates its name, replaced by its length.
GENERATED_NAME_STEPS = {"c_create_ephemeral", "c_create_ephemeral_legacy_filter"}


def mask_generated_name(answer: Any) -> Any:
    if not isinstance(answer, dict) or not isinstance(answer.get("name"), str):
        return answer
    masked = f"<generated name of {len(answer['name'])} characters>"
    config = answer.get("config")
    if isinstance(config, dict) and config.get("name") == answer["name"]:
        config = {**config, "name": masked}
    return {**answer, "name": masked, "config": config}


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
        left, right = (normalize(answers.get(step.name, MISSING)) for answers in (nats_answers, jsraft_answers))
        if step.name in GENERATED_NAME_STEPS:
            left, right = mask_generated_name(left), mask_generated_name(right)
        for path, a, b in diff(left, right):
            found.append((step.name, path, a, b))
    return found
