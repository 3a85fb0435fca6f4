"""Node config files: JSON, TOML or nats-server's format -> the dict `NodeConfig.from_dict` decodes (layer L5).

Owns: reading a config file, telling its format (`config_format`: `.json` / `.toml` by name; otherwise
JSON when it parses as a JSON object, TOML when it parses as TOML and uses only `NodeConfig`'s field
names, else nats-server's format, so `jsraft serve -c nats.conf` reads what nats-server reads),
turning every parse failure into `InvalidConfig` naming the file and the position, and laying command-line
overrides over a file's settings (`merge_overrides`). Field names and their meaning are `NodeConfig`'s: a
file uses exactly the field names (`name`, `store_dir`, `cluster_port`, `peers` or `routes`, ...), and an
unknown one is refused by the strict decode in `NodeConfig.from_dict`, never ignored.

Invariants:
  1. Nothing here guesses or coerces a value: a file that does not parse, or whose top level is not a
     table/object, is an `InvalidConfig`, and the types inside are checked by the strict converter.
  2. An override of the peer list replaces the file's whole list, whichever spelling (`peers`, `routes`)
     either side used, so a flag never merges with a file into a cluster nobody wrote down.

A nats-server file's keys are translated by `nats_conf_map`; what it does not support is logged as a
warning (logging's last-resort handler prints it to stderr before `jsraft serve` sets up its own).

Imports: stdlib (`json`, `tomllib`, `logging`), L0 (`errors`), server siblings (`nats_conf`,
`nats_conf_map`). Reference: nats-server's refusal of unknown config
fields; DESIGN.md §10.
"""

from __future__ import annotations

import json
import logging
import os
import tomllib
from collections.abc import Collection
from typing import Any

from jsraft.errors import InvalidConfig
from jsraft.server.settings.nats_conf import FILE_BYTES_MAX, parse_nats_conf, read_text
from jsraft.server.settings.nats_conf_map import node_fields

log = logging.getLogger("jsraft.config")

CONFIG_FILE_BYTES_MAX = FILE_BYTES_MAX  # a node config is a few hundred bytes; refuse to read a runaway file
_PEER_KEYS = ("peers", "routes")


def config_format(path: str, text: str, field_names: Collection[str] = ()) -> str:
    """`"json"`, `"toml"` or `"nats"`: by the file name's suffix, else by what the text parses as (see
    the module docstring); `field_names` are `NodeConfig`'s."""
    suffix = os.path.splitext(path)[1].lower()
    if suffix in (".json", ".toml"):
        return suffix[1:]
    if text.lstrip().startswith("{"):
        try:
            if isinstance(json.loads(text), dict):
                return "json"
        except json.JSONDecodeError:
            pass
        return "nats"
    try:
        keys = set(tomllib.loads(text))
    except tomllib.TOMLDecodeError:
        return "nats"
    return "toml" if not field_names or keys <= {*field_names, "routes"} else "nats"


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


def load_config_file(path: str, field_names: Collection[str] = ()) -> dict[str, Any]:
    """Read and parse the config file at `path` (invariant 1); `field_names`: `NodeConfig`'s."""
    text = read_text(path)
    fmt = config_format(path, text, field_names)
    if fmt != "nats":
        return parse_config_text(text, fmt, path)
    fields, notes = node_fields(parse_nats_conf(text, path), set(field_names))
    for note in notes:
        log.warning("config file %s: %s", path, note)
    return fields


def merge_overrides(data: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """`data` with `overrides` laid on top; a peer list in `overrides` replaces the file's (invariant 2)."""
    merged = dict(data)
    if any(key in overrides for key in _PEER_KEYS):
        for key in _PEER_KEYS:
            merged.pop(key, None)
    merged.update(overrides)
    return merged
