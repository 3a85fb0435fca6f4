"""nats-server's configuration file syntax, parsed into plain Python values (layer L5).

Owns: reading the format `nats-server -c FILE` reads — `key: value`, `key = value` and `key value`;
blocks `{ … }` (the separator before a block is optional); arrays `[ … ]`, items separated by commas or
new lines; comments `#` and `//`; quoted strings ('…' and "…") and bare words; numbers with size
suffixes (`64MB`, `1k`); booleans (`true`/`false`/`yes`/`no`/`on`/`off`); variables (`$NAME`: a key
defined earlier in an enclosing block, else the environment); `include FILE` (relative to the including
file). What the keys mean is `nats_conf_map`'s business.

Invariants:
  1. Anything that does not parse is an `InvalidConfig` naming the file and the line; nothing is guessed.
  2. A variable that is neither defined nor in the environment is an error, never an empty string.
  3. Includes nest at most `INCLUDE_DEPTH_MAX` deep and each file is read with the same size bound as the
     top-level file, so a cycle or a runaway file fails with a message instead of hanging.

Imports: stdlib (`os`, `re`), L0 (`errors`). Reference: nats-server `conf/lex.go`, `conf/parse.go`.
"""

from __future__ import annotations

import os
import re
from typing import Any

from jsraft.errors import InvalidConfig

INCLUDE_DEPTH_MAX = 8
FILE_BYTES_MAX = 1 << 20
_SIZE = re.compile(r"(-?\d+)(k|kb|ki|kib|m|mb|mi|mib|g|gb|gi|gib|t|tb|ti|tib)", re.IGNORECASE)
_BOOLS = {"true": True, "yes": True, "on": True, "false": False, "no": False, "off": False}
_KEY_END = set(" \t\r\n:={[")
_VALUE_END = set(" \t\r\n,}]#;")


def read_text(path: str) -> str:
    """A config file's text: bounded (invariant 3), UTF-8, or an `InvalidConfig` naming the file."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(FILE_BYTES_MAX + 1)
    except OSError as error:
        raise InvalidConfig(f"node config file {path}: cannot read: {error.strerror or error}") from None
    if len(raw) > FILE_BYTES_MAX:
        raise InvalidConfig(f"node config file {path}: larger than {FILE_BYTES_MAX} bytes")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise InvalidConfig(f"node config file {path}: not UTF-8 (byte {error.start})") from None


def parse_nats_conf(text: str, path: str, *, depth: int = 0, scopes: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The top-level map of a nats-server config file's `text` (read from `path`)."""
    return _Parser(text, path, depth, scopes or []).document()


def convert_bare(word: str) -> Any:
    """A bare word's value: a boolean, an integer (with a size suffix), a float, else the word itself."""
    lowered = word.lower()
    if lowered in _BOOLS:
        return _BOOLS[lowered]
    if re.fullmatch(r"-?\d+", word):
        return int(word)
    size = _SIZE.fullmatch(word)
    if size:  # nats-server: `k` is 1000, `kb`/`ki`/`kib` 1024 (and so on up to `t`)
        suffix = size.group(2).lower()
        return int(size.group(1)) * (1000 if len(suffix) == 1 else 1024) ** ("kmgt".index(suffix[0]) + 1)
    if re.fullmatch(r"-?\d+\.\d*", word):
        return float(word)
    return word


class _Parser:
    def __init__(self, text: str, path: str, depth: int, scopes: list[dict[str, Any]]) -> None:
        self.text = text
        self.path = path
        self.depth = depth
        self.pos = 0
        self.scopes = scopes  # enclosing blocks' maps, outermost first (variables, invariant 2)

    def fail(self, why: str) -> InvalidConfig:
        line = self.text.count("\n", 0, self.pos) + 1
        return InvalidConfig(f"config file {self.path}, line {line}: {why}")

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def skip(self, *, newlines: bool, separators: str = "") -> None:
        """Skip blanks and comments (and new lines and `separators` when asked)."""
        text = self.text
        while self.pos < len(text):
            char = text[self.pos]
            if char in " \t\r" or (newlines and char == "\n") or char in separators:
                self.pos += 1
            elif char == "#" or text.startswith("//", self.pos):
                end = text.find("\n", self.pos)
                self.pos = len(text) if end < 0 else end
            else:
                return

    def document(self) -> dict[str, Any]:
        return self.block(None)

    def block(self, close: str | None) -> dict[str, Any]:
        result: dict[str, Any] = {}
        self.scopes.append(result)
        try:
            while True:
                self.skip(newlines=True, separators=",;")
                char = self.peek()
                if not char:
                    if close is not None:
                        raise self.fail(f"a block is not closed with {close!r}")
                    return result
                if char == close:
                    self.pos += 1
                    return result
                if char in "}]":
                    raise self.fail(f"unexpected {char!r}")
                self.entry(result)
        finally:
            self.scopes.pop()

    def entry(self, result: dict[str, Any]) -> None:
        key = self.quoted() if self.peek() in "\"'" else self.word(_KEY_END)
        self.skip(newlines=False)
        if key == "include" and self.peek() not in ":=":
            result.update(self.include())
            return
        if self.peek() in ":=":
            self.pos += 1
            self.skip(newlines=False)
        if self.peek() in ("", "\n"):
            self.skip(newlines=True)  # a block may open on the next line (`websocket` NL `{`)
            if self.peek() != "{":
                raise self.fail(f"key {key!r} has no value")
        result[key] = self.value()

    def include(self) -> dict[str, Any]:
        target = self.quoted() if self.peek() in "\"'" else self.word(_VALUE_END)
        if self.depth >= INCLUDE_DEPTH_MAX:
            raise self.fail(f"includes nest deeper than {INCLUDE_DEPTH_MAX} (a cycle?)")
        path = os.path.join(os.path.dirname(self.path), target)
        return parse_nats_conf(read_text(path), path, depth=self.depth + 1, scopes=self.scopes)

    def value(self) -> Any:
        char = self.peek()
        if char == "{":
            self.pos += 1
            return self.block("}")
        if char == "[":
            self.pos += 1
            return self.array()
        if char in "\"'":
            return self.quoted()
        word = self.word(_VALUE_END)
        if word.startswith("$"):
            return self.variable(word[1:])
        return convert_bare(word)

    def array(self) -> list[Any]:
        items: list[Any] = []
        while True:
            self.skip(newlines=True, separators=",")
            char = self.peek()
            if not char:
                raise self.fail("an array is not closed with ']'")
            if char == "]":
                self.pos += 1
                return items
            items.append(self.value())

    def word(self, ends: set[str]) -> str:
        start = self.pos
        while self.pos < len(self.text) and self.text[self.pos] not in ends:
            self.pos += 1
        if self.pos == start:
            raise self.fail(f"expected a key or value, found {self.peek()!r}")
        return self.text[start:self.pos]

    def quoted(self) -> str:
        quote = self.peek()
        end = self.text.find(quote, self.pos + 1)
        if end < 0 or "\n" in self.text[self.pos:end]:
            raise self.fail("a quoted string is not closed on its line")
        value = self.text[self.pos + 1:end]
        self.pos = end + 1
        if quote == '"':
            value = value.replace("\\\\", "\\").replace('\\"', '"').replace("\\n", "\n").replace("\\t", "\t")
        return value

    def variable(self, name: str) -> Any:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        if name in os.environ:
            return convert_bare(os.environ[name])
        raise self.fail(f"variable ${name} is not defined (neither in this file nor in the environment)")
