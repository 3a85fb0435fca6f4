"""What a nats-server config file's keys mean for a jsraft node: nats-server's names -> `NodeConfig` fields.

Owns: `node_fields(conf, where)`, turning the map `nats_conf` parsed into the JSON-shaped dict
`NodeConfig.from_dict` decodes, plus a list of notes about what jsraft does not do. Covered: server name,
`listen`/`host`/`port`, `http`/`http_port`/`https_port`, `jetstream { store_dir, domain … }`, `cluster { name,
listen, routes, authorization, tls }`, `authorization { … }` (a user, a token, `users` with permissions,
`default_permissions`, `timeout`), `accounts` (each account's users; see `accounts_users` for which one JetStream
serves; that account's `jetstream { max_mem … }` limits, `account_limits`), `no_auth_user`, `tls { … }`, operator
mode (`operator` — a JWT or a file holding one — or `trusted_keys`, `resolver: MEMORY`, `resolver_preload {
ACCOUNT_KEY: JWT }`; see `trust_fields`), `max_payload`, `max_pending`, `ping_interval`, `ping_max`,
`write_deadline`, `lame_duck_duration`/`_grace_period`, `ports_file_dir` (where `NodeConfig` has the field).

Invariants:
  1. Nothing is ignored silently: a key jsraft does not act on is named in a note (logged as a warning),
     and one whose absence would weaken security — an unknown key inside `authorization`, `tls`, a user
     or its permissions; a resolver other than MEMORY, `system_account`; JetStream in
     several accounts;
     `verify_and_map`, `insecure` — is an `InvalidConfig` naming it.
  2. A cluster route must name its node (`NAME=nats://HOST:PORT`, or `nats://NAME@HOST:PORT`): jsraft's
     Raft voters are named before any connection is made.
  3. Durations are nats-server's: a number of seconds or a string `500ms`, `2s`, `1m`, `1h`.

Imports: stdlib, L0 (`errors`). Reference: nats-server `server/opts.go` (`processConfigFileLine`,
`parseAuthorization`, `parseUsers`, `parseUserPermissions`, `parseTLS`, `parseCluster`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from jsraft.errors import InvalidConfig

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}
_TLS_KEYS = {"cert_file": "cert_file", "key_file": "key_file", "ca_file": "ca_file", "verify": "verify",
             "handshake_first": "handshake_first", "timeout": "timeout_ms"}
_TLS_NOTED = ("cipher_suites", "curve_preferences", "min_version", "pinned_certs", "ocsp_peer")
_UNSAFE_TOP = ("system_account",)
_TRUSTED_KEYS = ("trusted", "trusted_keys")
_OPERATOR_KEYS = ("operator", "operators", "roots", "root", "root_operators", "root_operator")
_RESOLVER_KEYS = ("resolver", "account_resolver", "accounts_resolver")
_MEMORY_RESOLVER = re.compile(r"(?i)\s*(MEM|MEMORY)\s*")
_JWT_PREFIX = "eyJ"  # nats-server's jwtPrefix: an operator value that is not a file but a JWT
_IGNORED_TOP = ("debug", "trace", "logtime", "log_file", "syslog", "max_connections", "max_control_line",
                "max_subscriptions", "websocket", "leafnodes", "gateway", "mqtt", "server_tags", "max_traced_msg_len",
                "connect_error_reports", "reconnect_error_reports", "disable_sublist_cache", "no_header_support")


def duration_ms(value: Any, where: str) -> int:
    """Invariant 3."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value * 1000)
    match = _DURATION.fullmatch(str(value))
    if match is None:
        raise InvalidConfig(f"{where}: {value!r} is not a duration (seconds, or like 500ms, 2s, 1m)")
    return int(float(match.group(1)) * _UNIT_MS[match.group(2)])


def _host_port(text: Any, where: str) -> tuple[str, int]:
    if isinstance(text, int):
        return "0.0.0.0", text
    rest = str(text).partition("://")[2] or str(text)
    host, sep, port = rest.rpartition(":")
    if not sep or not port.isdigit():
        raise InvalidConfig(f"{where}: {text!r} is not HOST:PORT")
    return host.strip("[]") or "0.0.0.0", int(port)


def _table(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidConfig(f"{where}: expected a block {{ … }}, got {value!r}")
    return value


def _refuse_unknown(block: dict[str, Any], known: set[str], where: str) -> None:
    """Invariant 1, the unsafe half."""
    unknown = sorted(set(block) - known)
    if unknown:
        raise InvalidConfig(f"{where}: unsupported key(s) {', '.join(unknown)}; refusing to start rather than "
                            "run with weaker security than configured")


def tls_fields(block: Any, where: str, notes: list[str]) -> dict[str, Any]:
    block = _table(block, where)
    _refuse_unknown(block, set(_TLS_KEYS) | set(_TLS_NOTED), where)
    fields = {_TLS_KEYS[key]: value for key, value in block.items() if key in _TLS_KEYS}
    if "timeout_ms" in fields:
        fields["timeout_ms"] = duration_ms(fields["timeout_ms"], f"{where}.timeout")
    notes += [f"{where}.{key} is not supported; Python's ssl defaults apply" for key in _TLS_NOTED if key in block]
    return fields


def _subject_permission(value: Any, where: str) -> dict[str, Any]:
    if isinstance(value, (str, list)):  # a bare list is the allow list
        return {"allow": [value] if isinstance(value, str) else value}
    block = _table(value, where)
    _refuse_unknown(block, {"allow", "deny"}, where)
    return {key: [items] if isinstance(items, str) else items for key, items in block.items()}


def permission_fields(block: Any, where: str) -> dict[str, Any]:
    block = _table(block, where)
    _refuse_unknown(block, {"publish", "subscribe", "allow_responses", "pub", "sub", "resp"}, where)
    fields: dict[str, Any] = {}
    for key, name in (("publish", "publish"), ("pub", "publish"), ("subscribe", "subscribe"), ("sub", "subscribe")):
        if key in block:
            fields[name] = _subject_permission(block[key], f"{where}.{key}")
    responses = block.get("allow_responses", block.get("resp"))
    if responses is True:
        fields["allow_responses"] = {}
    elif isinstance(responses, dict):
        _refuse_unknown(responses, {"max", "expires", "ttl"}, f"{where}.allow_responses")
        fields["allow_responses"] = {"max": responses.get("max", 1)}
        expires = responses.get("expires", responses.get("ttl"))
        if expires is not None:
            fields["allow_responses"]["expires_ms"] = duration_ms(expires, f"{where}.allow_responses.expires")
    elif responses not in (None, False):
        raise InvalidConfig(f"{where}.allow_responses: expected true, false or {{ max, expires }}")
    return fields


def user_fields(entry: Any, where: str) -> dict[str, Any]:
    entry = _table(entry, where)
    _refuse_unknown(entry, {"user", "username", "password", "pass", "nkey", "permissions", "account"}, where)
    fields: dict[str, Any] = {}
    for key, name in (("user", "user"), ("username", "user"), ("password", "password"), ("pass", "password"),
                      ("nkey", "nkey")):
        if key in entry:
            fields[name] = str(entry[key])
    if "permissions" in entry:
        fields["permissions"] = permission_fields(entry["permissions"], f"{where}.permissions")
    return fields


def authorization_fields(block: Any, where: str) -> dict[str, Any]:
    """`authorization { user, password | token | users [...]; permissions; default_permissions; timeout }`."""
    block = _table(block, where)
    _refuse_unknown(block, {"user", "username", "password", "pass", "token", "users", "permissions",
                            "default_permissions", "timeout"}, where)
    fields: dict[str, Any] = {}
    users = [user_fields(entry, f"{where}.users[{i}]") for i, entry in enumerate(block.get("users", []))]
    if any(key in block for key in ("user", "username")):
        users.append(user_fields({key: block[key] for key in ("user", "username", "password", "pass", "permissions")
                                  if key in block}, where))
    elif "permissions" in block:
        fields["default_permissions"] = permission_fields(block["permissions"], f"{where}.permissions")
    if users:
        fields["users"] = users
    if "token" in block:
        fields["token"] = str(block["token"])
    if "default_permissions" in block:
        fields["default_permissions"] = permission_fields(block["default_permissions"], f"{where}.default_permissions")
    if "timeout" in block:
        fields["timeout_ms"] = duration_ms(block["timeout"], f"{where}.timeout")
    return fields


def accounts_users(block: Any, notes: list[str]) -> list[dict[str, Any]]:
    """The users of every account (invariant 1): the main account's without an `account` field, each
    other account's tagged with its name (isolated subjects). The main account is the only one, or the
    one account with `jetstream` enabled; with several and none enabled, JetStream serves none of them."""
    block = _table(block, "accounts")
    accounts = {name: _table(account, f"accounts.{name}") for name, account in block.items()}
    for name, account in accounts.items():
        _refuse_unknown(account, {"users", "jetstream"}, f"accounts.{name}")
    with_js = [name for name, account in accounts.items()
               if account.get("jetstream") not in (None, False, "disabled", "disable")]
    if len(with_js) > 1:
        raise InvalidConfig(f"accounts: JetStream in more than one account ({', '.join(with_js)}) is not "
                            "supported by jsraft")
    main = with_js[0] if with_js else next(iter(accounts)) if len(accounts) == 1 else None
    users = []
    for name, account in accounts.items():
        for i, entry in enumerate(account.get("users", [])):
            fields = user_fields(entry, f"accounts.{name}.users[{i}]")
            fields.pop("account", None)
            users.append(fields if name == main else {**fields, "account": str(name)})
    return users


# nats-server's spellings of an account's JetStream limits (`parseJetStreamForAccount`) -> `AccountLimits`.
_ACCOUNT_LIMIT_KEYS = {
    **dict.fromkeys(("max_memory", "max_mem", "mem", "memory"), "max_memory"),
    **dict.fromkeys(("max_store", "max_file", "max_disk", "store", "disk"), "max_storage"),
    **dict.fromkeys(("max_streams", "streams"), "max_streams"),
    **dict.fromkeys(("max_consumers", "consumers"), "max_consumers"),
    **dict.fromkeys(("max_bytes_required", "max_stream_bytes", "max_bytes"), "max_bytes_required"),
    **dict.fromkeys(("mem_max_stream_bytes", "memory_max_stream_bytes"), "memory_max_stream_bytes"),
    **dict.fromkeys(("disk_max_stream_bytes", "store_max_stream_bytes"), "storage_max_stream_bytes"),
    "max_ack_pending": "max_ack_pending",
}


def account_limits(block: Any, notes: list[str]) -> dict[str, Any] | None:
    """The limits of the account JetStream serves (`accounts_users` picks it), as `AccountLimits` fields;
    None when its `jetstream` is not a block. A key nats-server does not know is refused, as nats-server
    refuses it; `cluster_traffic` (which account carries Raft traffic) is noted."""
    accounts = _table(block, "accounts")
    with_js = [account for account in accounts.values()
               if isinstance(account, dict) and isinstance(account.get("jetstream"), dict)]
    if len(with_js) != 1:
        return None
    fields: dict[str, Any] = {}
    for key, value in with_js[0]["jetstream"].items():
        where = f"accounts.jetstream.{key}"
        if key.lower() == "cluster_traffic":
            notes.append(f"{where} is not supported (one account carries all traffic); ignored")
            continue
        name = _ACCOUNT_LIMIT_KEYS.get(key.lower())
        if name is None:
            raise InvalidConfig(f"{where}: unknown JetStream account limit")
        wanted = bool if name == "max_bytes_required" else int
        if not isinstance(value, wanted) or (wanted is int and isinstance(value, bool)):
            raise InvalidConfig(f"{where}: expected a {'boolean' if wanted is bool else 'size or number'}, "
                                f"got {value!r}")
        fields[name] = value
    return fields


def _decorated_jwt(contents: str) -> str:
    """The JWT of an operator file: the line inside a `-----BEGIN … JWT-----` block, or the whole text."""
    lines = [line.strip() for line in contents.splitlines()]
    for i in range(len(lines) - 2):
        if lines[i].startswith("---") and lines[i + 2].startswith("---") and lines[i + 1]:
            return lines[i + 1]
    return contents.strip()


def _operator_jwt(value: Any, where: str) -> str:
    """nats-server's `readOperatorJWT`: a file holding the JWT, or (starting `eyJ`) the JWT itself."""
    text = str(value)
    try:
        with open(text, encoding="utf-8") as file:
            return _decorated_jwt(file.read())
    except OSError as error:
        if not text.startswith(_JWT_PREFIX):
            raise InvalidConfig(f"{where}: cannot read operator JWT file {text!r}: {error.strerror}") from None
    return _decorated_jwt(text)


def trust_fields(conf: dict[str, Any]) -> dict[str, Any] | None:
    """Operator mode's `TrustConfig` fields from the top-level keys, or None without an operator or trusted
    keys."""
    operator_keys = [key for key in _OPERATOR_KEYS if key in conf]
    trusted = [str(value) for key in _TRUSTED_KEYS if key in conf
               for value in (conf[key] if isinstance(conf[key], list) else [conf[key]])]
    resolver_keys = [key for key in _RESOLVER_KEYS if key in conf]
    if not operator_keys and not trusted:
        if resolver_keys or "resolver_preload" in conf:
            raise InvalidConfig("resolver: an account resolver needs an operator (operator: <JWT or file>)")
        return None
    operators = []
    for key in operator_keys:
        values = conf[key] if isinstance(conf[key], list) else [conf[key]]
        operators += [_operator_jwt(value, key) for value in values]
    if not resolver_keys:
        raise InvalidConfig("operator: operators require an account resolver to be configured (resolver: MEMORY)")
    resolver = conf[resolver_keys[0]]
    if not isinstance(resolver, str) or not _MEMORY_RESOLVER.fullmatch(resolver):
        raise InvalidConfig(f"{resolver_keys[0]}: only the MEMORY resolver is supported by jsraft (got "
                            f"{str(resolver)[:40]!r}); refusing to start without the accounts it would serve")
    preload = _table(conf.get("resolver_preload", {}), "resolver_preload")
    if not all(isinstance(jwt, str) for jwt in preload.values()):
        raise InvalidConfig("resolver_preload: preload map value should be a string JWT")
    return {"operators": operators, "trusted_keys": trusted,
            "resolver_preload": {str(key): jwt.strip() for key, jwt in preload.items()}}


Handler = Callable[[Any, dict[str, Any], list[str]], None]


def _route(text: Any, where: str) -> tuple[str, str]:
    """Invariant 2: `NAME=nats://HOST:PORT` or `nats://NAME@HOST:PORT` -> (NAME, HOST:PORT)."""
    text = str(text)
    name, sep, url = text.partition("=")
    if not sep:
        scheme, _, rest = text.rpartition("://")
        name, sep, url = rest.partition("@")
    host, port = _host_port(url, where) if sep else ("", 0)
    if not sep or not name or ":" in name:
        raise InvalidConfig(f"{where}: route {text!r} must name its node (NAME=nats://HOST:PORT or "
                            "nats://NAME@HOST:PORT): jsraft's Raft voters are named")
    return name, f"{host}:{port}"


def _cluster(block: Any, fields: dict[str, Any], notes: list[str]) -> None:
    block = _table(block, "cluster")
    for key, value in block.items():
        where = f"cluster.{key}"
        if key == "name":
            fields["cluster_name"] = str(value)
        elif key == "listen":
            fields["cluster_host"], fields["cluster_port"] = _host_port(value, where)
        elif key in ("host", "port"):
            fields[f"cluster_{key}"] = value
        elif key == "routes":
            fields["peers"] = dict(_route(route, where) for route in ([value] if isinstance(value, str) else value))
        elif key == "authorization":
            auth = _table(value, where)
            _refuse_unknown(auth, {"user", "username", "password", "pass", "token", "timeout"}, where)
            parts = [str(auth[k]) for k in ("user", "username", "password", "pass", "token") if k in auth]
            if not parts:
                raise InvalidConfig(f"{where}: give a token, or a user and password")
            fields["cluster_secret"] = ":".join(parts)  # every node holds the same block: one shared secret
        elif key == "tls":
            fields["cluster_tls"] = tls_fields(value, where, notes)
        else:
            notes.append(f"{where} is not supported; ignored")


def _jetstream(value: Any, fields: dict[str, Any], notes: list[str]) -> None:
    if isinstance(value, bool) or value in ("enabled", "enable", "disabled", "disable"):
        if value in (False, "disabled", "disable"):
            notes.append("jetstream cannot be turned off in jsraft; it stays on")
        return
    for key, item in _table(value, "jetstream").items():
        if key in ("store_dir", "storedir", "store"):
            fields["store_dir"] = str(item)
        elif key == "domain":
            fields["jetstream_domain"] = str(item)
        else:
            notes.append(f"jetstream.{key} is not supported by jsraft; ignored")


def _listen(value: Any, fields: dict[str, Any], notes: list[str]) -> None:
    fields["client_host"], fields["client_port"] = _host_port(value, "listen")


def _http(value: Any, fields: dict[str, Any], notes: list[str]) -> None:
    fields["monitor_host"], fields["monitor_port"] = _host_port(value, "http")


def _simple(field: str, convert: Callable[[Any], Any] = lambda value: value) -> Handler:
    def handler(value: Any, fields: dict[str, Any], notes: list[str]) -> None:
        fields[field] = convert(value)
    return handler


_HANDLERS: dict[str, Handler] = {
    "server_name": _simple("name"), "name": _simple("name"), "listen": _listen,
    "host": _simple("client_host"), "net": _simple("client_host"), "addr": _simple("client_host"),
    "port": _simple("client_port"), "http": _http, "monitor": _http, "http_port": _simple("monitor_port"),
    "monitor_port": _simple("monitor_port"), "jetstream": _jetstream,
    "store_dir": _simple("store_dir"), "cluster": lambda value, fields, notes: _cluster(value, fields, notes),
    "max_payload": _simple("max_payload"), "max_pending": _simple("client_pending_bytes_max"),
    "ping_interval": _simple("client_ping_interval_ms", lambda v: duration_ms(v, "ping_interval")),
    "ping_max": _simple("client_pings_out_max"),
    "write_deadline": _simple("client_write_deadline_ms", lambda v: duration_ms(v, "write_deadline")),
    **{k: _simple(f"{k}_ms", lambda v, k=k: duration_ms(v, k)) for k in ("lame_duck_duration", "lame_duck_grace_period")},
}


def node_fields(conf: dict[str, Any], known_fields: set[str]) -> tuple[dict[str, Any], list[str]]:
    """(`NodeConfig` fields, notes) for a parsed nats-server config (invariants 1–3). `known_fields`:
    `NodeConfig`'s field names (a key like `ports_file_dir` maps only where the field exists)."""
    fields: dict[str, Any] = {}
    notes: list[str] = []
    auth: dict[str, Any] = {}
    tls_block = None
    for key, value in conf.items():
        if key in _UNSAFE_TOP:
            raise InvalidConfig(f"{key} is not supported by jsraft (operator mode takes operator, resolver: MEMORY "
                                "and resolver_preload); refusing to start without the authentication it configures")
        if key in (*_OPERATOR_KEYS, *_TRUSTED_KEYS, *_RESOLVER_KEYS, "resolver_preload"):
            continue  # trust_fields, below
        if key in _HANDLERS:
            _HANDLERS[key](value, fields, notes)
        elif key == "authorization":
            auth.update(authorization_fields(value, "authorization"))
        elif key == "accounts":
            auth.setdefault("users", []).extend(accounts_users(value, notes))
            limits = account_limits(value, notes)
            if limits is not None:
                fields["account_limits"] = limits
        elif key == "no_auth_user":
            auth["no_auth_user"] = str(value)
        elif key == "tls":
            tls_block = tls_fields(value, "tls", notes)
            fields["client_tls"] = tls_block
        elif key in ("https", "https_port"):
            fields["monitor_host"], fields["monitor_port"] = _host_port(value, key)
            fields["monitor_tls"] = "tls"  # resolved below, once the tls block is known
        elif key in known_fields:
            fields[key] = value
        else:
            notes.append(f"{key} is not supported by jsraft; ignored" if key in _IGNORED_TOP else
                         f"unknown key {key}; ignored")
    if fields.get("monitor_tls") == "tls":
        if tls_block is None:
            raise InvalidConfig("https_port needs a tls { … } block with the certificate to serve")
        fields["monitor_tls"] = {key: value for key, value in tls_block.items() if key != "handshake_first"}
    trust = trust_fields(conf)
    if trust is not None:
        auth["trust"] = trust
    if auth:
        fields["client_auth"] = auth
    return fields, notes
