"""Node config files: JSON or TOML on disk -> the JSON-shaped dict `NodeConfig.from_dict` decodes (layer L5).

Owns: reading a config file, telling its format (`.json` / `.toml` by name, else by its first character),
turning every parse failure into `InvalidConfig` naming the file and the position, and laying command-line
overrides over a file's settings (`merge_overrides`). Field names and their meaning are `NodeConfig`'s: a
file uses exactly the field names (`name`, `store_dir`, `cluster_port`, `peers` or `routes`, ...), and an
unknown one is refused by the strict decode in `NodeConfig.from_dict`, never ignored.

Invariants:
  1. Nothing here guesses or coerces a value: a file that does not parse, or whose top level is not a
     table/object, is an `InvalidConfig`, and the types inside are checked by the strict converter.
  2. An override of the peer list replaces the file's whole list, whichever spelling (`peers`, `routes`)
     either side used, so a flag never merges with a file into a cluster nobody wrote down.

Imports: stdlib (`json`, `tomllib`), L0 (`errors`). Reference: nats-server's refusal of unknown config
fields; DESIGN.md §10.
"""

from __future__ import annotations

import json
import os
import tomllib
from typing import Any

from jsraft.errors import InvalidConfig

CONFIG_FILE_BYTES_MAX = 1 << 20  # a node config is a few hundred bytes; refuse to read a runaway file
_PEER_KEYS = ("peers", "routes")


def config_format(path: str, text: str) -> str:
    """`"json"` or `"toml"`: by the file name's suffix, else by the first non-blank character."""
    suffix = os.path.splitext(path)[1].lower()
    if suffix in (".json", ".toml"):
        return suffix[1:]
    return "json" if text.lstrip().startswith("{") else "toml"


def parse_config_text(text: str, fmt: str, where: str) -> dict[str, Any]:
    """Parse `text` as `fmt`; `InvalidConfig` naming `where` and the position on any failure."""
    try:
        data = json.loads(text) if fmt == "json" else tomllib.loads(text)
    except json.JSONDecodeError as error:
        raise InvalidConfig(f"node config file {where}: not valid JSON: {error.msg} at line {error.lineno} "
                            f"column {error.colno}") from None
    except tomllib.TOMLDecodeError as error:
        raise InvalidConfig(f"node config file {where}: not valid TOML: {error}") from None
    if not isinstance(data, dict):
        raise InvalidConfig(f"node config file {where}: the top level must be an object, got "
                            f"{type(data).__name__}")
    return data


def load_config_file(path: str) -> dict[str, Any]:
    """Read and parse the config file at `path` (invariant 1)."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(CONFIG_FILE_BYTES_MAX + 1)
    except OSError as error:
        raise InvalidConfig(f"node config file {path}: cannot read: {error.strerror or error}") from None
    if len(raw) > CONFIG_FILE_BYTES_MAX:
        raise InvalidConfig(f"node config file {path}: larger than {CONFIG_FILE_BYTES_MAX} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise InvalidConfig(f"node config file {path}: not UTF-8 (byte {error.start})") from None
    return parse_config_text(text, config_format(path, text), path)


def merge_overrides(data: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """`data` with `overrides` laid on top; a peer list in `overrides` replaces the file's (invariant 2)."""
    merged = dict(data)
    if any(key in overrides for key in _PEER_KEYS):
        for key in _PEER_KEYS:
            merged.pop(key, None)
    merged.update(overrides)
    return merged
