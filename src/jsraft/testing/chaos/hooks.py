"""`Hooks`: a blocking HTTP client for one node's test hooks (`server.test_hooks`, under `/test/` on the
monitor port; the node must run with `--test-hooks`).

Method: each call is one plain `urllib` request with a timeout, decoded from JSON; any HTTP error status,
connection failure, timeout or undecodable answer raises `HookError` (with `status` when the node
answered), so a harness polling a restarting node catches one exception type. Blocking on purpose: the
harness and the workloads call it from threads or plain code (from trio, use `trio.to_thread`).

Invariants: every call is bounded by `timeout_s`; nothing is retried here (the caller polls with its own
deadline).

Imports: stdlib only (test kit). Reference: ../shared/CHAOS.md "Test hooks"; /tmp chaos spec.
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

TIMEOUT_S = 5.0


class HookError(Exception):
    """A hook call that did not answer 200 with JSON; `status` is the HTTP status if there was one."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class Hooks:
    def __init__(self, base_url: str, *, timeout_s: float = TIMEOUT_S) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s

    def __repr__(self) -> str:
        return f"Hooks({self.base_url!r})"

    def call(self, hook: str, *, method: str = "GET", timeout_s: float | None = None, **params: Any) -> Any:
        """`method /test/<hook>?params` -> the decoded JSON answer; `HookError` otherwise."""
        query = urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})
        url = f"{self.base_url}/test/{hook}" + (f"?{query}" if query else "")
        request = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
        try:
            with urllib.request.urlopen(request, timeout=timeout_s or self.timeout_s) as answer:
                body = answer.read()
        except urllib.error.HTTPError as error:
            detail = error.read()[:500].decode("utf-8", "replace")
            raise HookError(f"{method} {url}: HTTP {error.code}: {detail}", error.code) from None
        except (urllib.error.URLError, http.client.HTTPException, OSError, TimeoutError) as error:
            raise HookError(f"{method} {url}: {error}") from None
        try:
            return json.loads(body)
        except ValueError:
            raise HookError(f"{method} {url}: not JSON: {body[:200]!r}") from None

    # --- The hooks (chaos spec) -------------------------------------------------------------------------

    def replica_read(self, stream: str, from_seq: int = 1, batch: int = 500) -> dict[str, Any]:
        return self.call("replica_read", stream=stream, from_seq=from_seq, batch=batch)

    def replica_read_all(self, stream: str, batch: int = 500, pages_max: int = 100_000) -> Iterator[dict[str, Any]]:
        """Every message of the local store, page by page (bounded by `pages_max` pages)."""
        seq = 1
        for _ in range(pages_max):
            page = self.replica_read(stream, seq, batch)
            yield from page["messages"]
            if page["next_seq"] > page["last_seq"]:
                return
            seq = page["next_seq"]
        raise HookError(f"replica_read_all({stream}): more than {pages_max} pages")

    def replica_state(self, stream: str) -> dict[str, Any]:
        return self.call("replica_state", stream=stream)

    def raft_state(self, group: str) -> dict[str, Any]:
        return self.call("raft_state", group=group)

    def meta_state(self) -> dict[str, Any]:
        return self.call("meta_state")

    def consumer_state(self, stream: str, consumer: str) -> dict[str, Any]:
        return self.call("consumer_state", stream=stream, consumer=consumer)

    def set_clock(self, offset_s: float | None = None, rate: float | None = None) -> dict[str, Any]:
        return self.call("clock", method="POST", offset_s=offset_s, rate=rate)

    def clock(self) -> dict[str, Any]:
        return self.call("clock")

    def advisories(self, stream: str | None = None) -> list[dict[str, Any]]:
        return list(self.call("advisories", stream=stream)["advisories"])

    def streams(self) -> list[str]:
        return list(self.call("streams")["streams"])

    def healthz(self) -> bool:
        """True when the node's monitor answers `/healthz?js-enabled-only=true` 200 — the process serves,
        whether or not it is ready yet (nats-server's liveness parameter; no `HookError`: a poll helper)."""
        try:
            with urllib.request.urlopen(f"{self.base_url}/healthz?js-enabled-only=true",
                                        timeout=self.timeout_s) as answer:
                return answer.status == 200
        except (urllib.error.URLError, http.client.HTTPException, OSError, TimeoutError):
            return False
