"""`jsraft serve`'s `--routes` and `--cluster` values (layer L6).

Owns: reading nats-server's route and cluster-listen spellings (`nats://`, `nats-route://` or no scheme;
`[::1]` hosts) into `NodeConfig` fields: named routes (`NAME=HOST:PORT`, a JetStream cluster's voters)
into `peers`, bare ones (nats-server's own form) into `seed_routes` (`server.nats.route_gossip`).

Invariants:
  1. A malformed value raises `InvalidConfig` naming it (`jsraft serve` exits 2 with that line).
  2. One node's routes are all named or all bare: a mix is refused (named peers are Raft voters; gossip
     never makes one).

Imports: stdlib, L0. Reference: nats-server's `--routes` and `--cluster` flags.
"""

from __future__ import annotations

from jsraft.errors import InvalidConfig


def _strip_scheme(text: str) -> str:
    """`nats://h:p`, `nats-route://h:p` -> `h:p` (nats-server parses these as URLs and ignores the scheme)."""
    scheme, sep, rest = text.partition("://")
    return rest if sep and scheme.replace("-", "").isalpha() else text


def parse_routes(values: list[str]) -> tuple[dict[str, str], list[str]]:
    """`--routes` values -> (named peers, seed routes). `NAME=[nats://]HOST:PORT` names a peer (a JetStream
    cluster's Raft voters are named before any connection); a bare `[nats://]HOST:PORT` is a seed route, as
    nats-server's: dialed by address, the rest of the cluster found by route gossip. One kind per node."""
    peers: dict[str, str] = {}
    seeds: list[str] = []
    for item in (part.strip() for value in values for part in value.split(",")):
        if not item:
            continue
        name, sep, address = item.partition("=")
        if not sep:
            seed = _strip_scheme(item)
            host, colon, port = seed.rpartition(":")
            if not colon or not host or not port.isdigit() or "@" in host:
                raise InvalidConfig(f"--routes: {item!r} is not NAME=HOST:PORT nor [nats://]HOST:PORT")
            if seed not in seeds:
                seeds.append(seed)
            continue
        if not name.strip() or not address.strip():
            raise InvalidConfig(f"--routes: {item!r} is not NAME=HOST:PORT")
        if name.strip() in peers:
            raise InvalidConfig(f"--routes: {name.strip()!r} is given twice")
        peers[name.strip()] = _strip_scheme(address.strip())
    if peers and seeds:
        raise InvalidConfig("--routes: give every route with its node's name (NAME=HOST:PORT) or none "
                            "(seed routes, found by gossip), not a mix")
    return peers, seeds


def parse_cluster(text: str) -> tuple[str, int]:
    """`--cluster nats://0.0.0.0:6222` (or `HOST:PORT`, `[::1]:6222`) -> `("0.0.0.0", 6222)`."""
    host, sep, port = _strip_scheme(text.strip()).rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not host or not port.isdigit() or "@" in host:
        raise InvalidConfig(f"--cluster: {text!r} is not [nats://]HOST:PORT")
    return host, int(port)
