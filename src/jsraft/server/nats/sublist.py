"""`Sublist`: who is interested in a subject — subscriptions with `*`/`>` wildcards and queue groups (L5).

Owns: a trie of subscription subjects, token by token, where `*` and `>` are children like any other
token; `match(subject)` walks the literal child, the `*` child and the `>` child of each level. A result is
the plain subscriptions (each gets the message) and the queue groups (one member of each gets it, the
caller picks which). Results are cached per subject until the next insert or remove, but only for a
subject seen at least twice since the last change: reply subjects (`_INBOX.<id>.<n>`) never repeat, and
caching them would only churn the cache (an insert per message and a clear every `CACHE_SUBJECTS_MAX`
messages that also drops the subjects that do repeat, such as a stream's).

A subscription is any object with `subject: str` and `queue: str | None` that is hashable by identity;
the sublist never looks at anything else, so client subscriptions and the server's internal ones share it.

Invariants:
  1. `match(s)` returns exactly the subscriptions whose subject matches the literal `s`
     (`jsraft.subjects.matches`), each once: plain ones in `plain`, queue members grouped by queue name
     (a queue group spans every subject it was subscribed with).
  2. Insert and remove keep no empty trie nodes: after removing everything, the trie is empty.
  3. The cache holds at most `CACHE_SUBJECTS_MAX` subjects and is cleared on every change; a subject
     enters it only on its second match since the last change (the first is noted in `_seen`, a set of
     at most `CACHE_SUBJECTS_MAX` subjects, cleared on every change and when full). Neither ever changes
     a result: a cached match equals the uncached trie walk.
  4. Each callable in `observers` is called as `observer(sub, added)` once per insert or remove that
     changed the sublist, after the change (cluster routes count client interest this way).

Imports: stdlib only (subjects are validated by the caller, `jsraft.subjects.validate`).
Reference: nats-server `server/sublist.go`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

CACHE_SUBJECTS_MAX = 4096


class Match(NamedTuple):
    plain: tuple[Any, ...]
    queues: tuple[tuple[Any, ...], ...]


_EMPTY = Match((), ())


class _Node:
    __slots__ = ("children", "plain", "queues")

    def __init__(self) -> None:
        self.children: dict[str, _Node] = {}
        self.plain: dict[Any, None] = {}  # a dict keeps insertion order, so results are deterministic
        self.queues: dict[str, dict[Any, None]] = {}

    def empty(self) -> bool:
        return not (self.children or self.plain or self.queues)


class Sublist:
    def __init__(self) -> None:
        self._root = _Node()
        self._count = 0
        self._cache: dict[str, Match] = {}
        self._seen: set[str] = set()
        self.observers: list[Callable[[Any, bool], None]] = []

    def __len__(self) -> int:
        return self._count

    def insert(self, sub: Any) -> None:
        node = self._root
        for token in sub.subject.split("."):
            child = node.children.get(token)
            if child is None:
                child = node.children[token] = _Node()
            node = child
        if sub.queue is None:
            if sub in node.plain:
                return
            node.plain[sub] = None
        else:
            members = node.queues.setdefault(sub.queue, {})
            if sub in members:
                return
            members[sub] = None
        self._count += 1
        self._cache.clear()
        self._seen.clear()
        for observer in self.observers:
            observer(sub, True)

    def remove(self, sub: Any) -> bool:
        """Remove `sub`; False when it was not there."""
        path = [self._root]
        for token in sub.subject.split("."):
            child = path[-1].children.get(token)
            if child is None:
                return False
            path.append(child)
        node = path[-1]
        if sub.queue is None:
            if node.plain.pop(sub, False) is False:
                return False
        else:
            members = node.queues.get(sub.queue)
            if members is None or members.pop(sub, False) is False:
                return False
            if not members:
                del node.queues[sub.queue]
        self._prune(path, sub.subject.split("."))
        self._count -= 1
        self._cache.clear()
        self._seen.clear()
        for observer in self.observers:
            observer(sub, False)
        return True

    @staticmethod
    def _prune(path: list[_Node], tokens: list[str]) -> None:
        """Invariant 2: drop the nodes the removal left empty, deepest first."""
        for depth in range(len(tokens), 0, -1):
            if not path[depth].empty():
                return
            del path[depth - 1].children[tokens[depth - 1]]

    def match(self, subject: str) -> Match:
        """Subscriptions interested in the literal `subject` (invariant 1)."""
        cached = self._cache.get(subject)
        if cached is not None:
            return cached
        result = self.walk(subject)
        seen = self._seen
        if subject not in seen:
            if len(seen) >= CACHE_SUBJECTS_MAX:
                seen.clear()
            seen.add(subject)
            return result
        seen.discard(subject)
        if len(self._cache) >= CACHE_SUBJECTS_MAX:
            self._cache.clear()
        self._cache[subject] = result
        return result

    def walk(self, subject: str) -> Match:
        """The uncached trie walk `match` answers from (invariant 1); tests compare the two."""
        plain: list[Any] = []
        queues: dict[str, list[Any]] = {}
        self._collect(self._root, subject.split("."), 0, plain, queues)
        return Match(tuple(plain), tuple(tuple(members) for members in queues.values())) \
            if plain or queues else _EMPTY

    def _collect(self, node: _Node, tokens: list[str], position: int, plain: list[Any],
                 queues: dict[str, list[Any]]) -> None:
        children = node.children
        if not children:
            return
        full = children.get(">")
        if full is not None:
            _add(full, plain, queues)
        last = position == len(tokens) - 1
        token = tokens[position]
        for child in (children.get("*"), children.get(token) if token not in ("*", ">") else None):
            if child is None:
                continue
            if last:
                _add(child, plain, queues)
            else:
                self._collect(child, tokens, position + 1, plain, queues)


def _add(node: _Node, plain: list[Any], queues: dict[str, list[Any]]) -> None:
    plain.extend(node.plain)
    for name, members in node.queues.items():
        queues.setdefault(name, []).extend(members)
