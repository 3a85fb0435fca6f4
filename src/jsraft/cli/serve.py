"""`jsraft serve`: one node as an OS process, configured by flags and/or a config file (layer L6).

Owns: the `serve` flags (jsraft's spellings, plus nats-server's where they mean the same: `-a/--addr/--net`,
`-p/--port`, `-n/--name/--server_name`, `-m/--http_port`, `-c/--config`, `-sd/--store_dir`, `-js/--jetstream`,
`--cluster/--cluster_listen`, `--routes`, `--cluster_name`, `-D/--debug`, each also in the single-dash long
form Go's flag package accepts, e.g. `-port`, `-store_dir=DIR`; and the security flags `--user`, `--pass`,
`--auth`, `--tls`, `--tlscert`, `--tlskey`, `--tlsverify`, `--tlscacert`, `--cluster-secret-file`,
`--monitor-token-file`), turning them into a `NodeConfig` (a config
file first, flags on top), logging to stderr, running the node with its monitor, and stopping on SIGTERM or
SIGINT. nats-server's routes are bare URLs; a JetStream cluster's name each node (`NAME=nats://HOST:PORT`),
because its Raft voters are named before any connection is made. Bare routes (no `-js`) are seed routes:
a core-NATS cluster that finds itself by route gossip (`server.nats.route_gossip`).

Invariants:
  1. A configuration error (unknown field, bad value, unreadable file, malformed flag) exits with status 2
     and one line naming the problem, before anything touches the store directory.
  2. SIGTERM and SIGINT stop the node cleanly: `/healthz` turns 503, the node is cancelled, its runtime
     closes every group and the stream stores are closed, then the process exits 0.
  3. The node listens for NATS clients on the client port (`-p`; the node starts the listener itself);
     `/varz` reports the port bound.
  4. `Server is ready` and the ports file come only once every listener is bound and the node is ready
     (`Node.wait_ready`: a meta leader, caught up), so a harness that waits for either can use the node
     at once; the ports file is removed when the node stops.
  5. SIGHUP reloads the TLS certificate files of every port (new connections use them; a reload that
     fails keeps the old ones and says so); it never stops the node.
  6. Secrets do not travel on the command line where jsraft chose the flag: the cluster secret and the
     monitor token are read from files (`--cluster-secret-file`, `--monitor-token-file`). `--pass` and
     `--auth` exist because nats-server (and nats-py's tests) use them.
  7. Given no store directory, a node asked for JetStream (`-js`) uses the shared default; one not asked
     a private directory removed when it stops (`serve_store`), as nats-server without `-js` stores nothing.
  8. The client socket `jsraft` bound before importing the node (`cli.early_listen`) is served only if the
     configuration asks for its host and port; otherwise it is closed and the node binds its own.
  9. SIGUSR2: lame duck mode (`server.ops.lame_duck`: no new client, clients told, leaderships handed over,
     clients closed over `lame_duck_duration`), then a stop as on SIGTERM, which meanwhile stops it at once;
     SIGUSR1 changes nothing (`serve_process` invariant 1). `-P/--pid` (`pid_file`) writes the process id.
 10. `-sl/--signal CMD[=PID|PIDFILE]` starts no node: it signals a running one (`serve_process.signal_command`).
 11. The process's full garbage collections freeze what survived them (`runtime.gc_freeze`, installed
     before the node starts): their pauses no longer grow with the number of streams.
 12. The soft open-file limit is raised to the hard one before the node opens a file
     (`serve_process.raise_open_file_limit`), as nats-server's Go runtime does.

Imports: stdlib, L0, L4 (`runtime.gc_freeze`), L5 (`server`), `cli.serve_store`, `cli.serve_routes`, trio. Reference: nats-server command-line flags; DESIGN.md §10.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shutil
import socket
import sys
from typing import Any

import trio

from jsraft import __version__
from jsraft.cli.early_listen import EarlyListener
from jsraft.cli.serve_process import HANDLED, PidFile, raise_open_file_limit, signal_command, watch_signals
from jsraft.cli.serve_routes import parse_cluster, parse_routes
from jsraft.cli.serve_store import DEFAULT_STORE_DIR, PRIVATE_PREFIX, jetstream_asked, with_defaults
from jsraft.errors import InvalidConfig, JsraftError
from jsraft.server import Node, NodeConfig
from jsraft.server.nats.client_server import NATS_VERSION
from jsraft.server.nats import jwt_auth, tls as nats_tls
from jsraft.runtime import gc_freeze

log = logging.getLogger("jsraft.serve")

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
RANDOM_PORT = -1  # nats-server's `-p -1`: any free port
# flag dest -> NodeConfig field, for flags that map one to one
_FIELDS = ("name", "store_dir", "client_host", "client_port", "cluster_port", "monitor_host", "monitor_port",
           "cluster_name", "tick_ms", "election_ticks", "test_hooks", "pid_file")


def _flag(parser: argparse.ArgumentParser, spellings: tuple[str, ...], go_names: tuple[str, ...] = (),
          **options: Any) -> None:
    """One option under `spellings` (shown in --help), and under `-NAME` for each of nats-server's long
    `go_names` (hidden): Go's flag package takes one dash as well as two, and without these argparse would
    read `-name=x` as `-n` with the value "ame=x" and `-cluster=URL` as `-c` (a config file) "luster=URL"."""
    parser.add_argument(*spellings, **options)
    if go_names:
        parser.add_argument(*(f"-{name}" for name in go_names), **{**options, "help": argparse.SUPPRESS})


def add_parser(sub: Any) -> None:
    serve = sub.add_parser("serve", help="run one node (flags and/or --config FILE)")
    _flag(serve, ("-c", "--config"), ("config",), metavar="FILE", help="config file, JSON or TOML (flags override it)")
    _flag(serve, ("-n", "--name", "--server_name"), ("name", "server_name"), dest="name",
          help="this node's name (unique in the cluster)")
    _flag(serve, ("-sd", "--store-dir", "--store_dir"), ("store_dir",), dest="store_dir", metavar="DIR",
          help="data directory")
    _flag(serve, ("-a", "--client-host", "--addr", "--net"), ("addr", "net"), dest="client_host", metavar="HOST",
          help="client listener host (default 127.0.0.1)")
    _flag(serve, ("-p", "--client-port", "--port"), ("port",), dest="client_port", type=int, metavar="PORT",
          help="NATS client port (default 4222; 0 or -1 picks a free port)")
    serve.add_argument("--cluster-port", type=int, metavar="PORT", help="cluster (node-to-node) listener port "
                       "(default 6222; opened only with peers, --cluster or this flag)")
    _flag(serve, ("--cluster", "--cluster_listen"), ("cluster", "cluster_listen"), dest="cluster",
          metavar="[nats://]HOST:PORT", help="cluster listener address")
    _flag(serve, ("-m", "--monitor-port", "--http_port"), ("http_port",), dest="monitor_port", type=int,
          metavar="PORT", help="monitoring HTTP port (/healthz, /varz, /jsz; -1 picks a free port); off unless given")
    serve.add_argument("--monitor-host", metavar="HOST", help="monitoring HTTP host (default 127.0.0.1)")
    _flag(serve, ("--routes", "--peers"), ("routes",), dest="peers", action="append",
          metavar="NAME=HOST:PORT,...",
          help="the other nodes' cluster addresses, each with its node name; nats:// optional "
               "(repeatable, comma-separated). Without -js, bare [nats://]HOST:PORT routes are seeds: "
               "the rest of the cluster is found by route gossip")
    _flag(serve, ("--cluster-name", "--cluster_name"), ("cluster_name",), dest="cluster_name", metavar="NAME",
          help="cluster name (default jsraft)")
    serve.add_argument("--tick-ms", type=int, help="Raft tick in milliseconds (default 100)")
    serve.add_argument("--election-ticks", type=int, help="ticks without a leader before an election (default 10)")
    _flag(serve, ("-js", "--jetstream"), ("jetstream",), dest="jetstream", action="store_true",
          help="accepted for nats-server parity; always on")
    serve.add_argument("--test-hooks", action="store_true", default=None,
                       help="serve the chaos test hooks under /test/ on the monitor port (tests only)")
    _flag(serve, ("--ports_file_dir",), ("ports_file_dir",), dest="ports_file_dir", metavar="DIR",
          help="write nats-server's ports file (nats-server_<pid>.ports) there once ready")
    _flag(serve, ("-P", "--pid"), ("pid",), dest="pid_file", metavar="FILE", help="write the process id there")
    _flag(serve, ("-sl", "--signal"), ("signal",), dest="signal", metavar="CMD[=PID|PIDFILE]",
          help="send a running jsraft serve a signal (ldm, stop, quit, term, reopen, reload) and exit")
    serve.add_argument("--log-level", choices=["debug", "info", "warning", "error"],
                       help="every logger at this level (default: the startup lines, then warnings only)")
    _add_api_level_flag(serve)
    _flag(serve, ("-D", "--debug", "-DV", "-VD"), ("debug",), dest="log_level", action="store_const",
          const="debug", help="the same as --log-level debug (nats-server's spelling; -DV also traces there)")
    _add_security_flags(serve)
    serve.set_defaults(func=cmd_serve)


# --- ADR-44: the API level a node runs at ----------------------------------------------------------------

def _add_api_level_flag(serve: argparse.ArgumentParser) -> None:
    serve.add_argument("--api-level", type=int, metavar="N", dest="api_level",
                       help="run at JetStream API level N, below this build's (tests, downgrade rehearsals): "
                            "streams and consumers needing more are loaded offline")


def _api_level_override(args: argparse.Namespace, overrides: dict[str, Any]) -> None:
    if getattr(args, "api_level", None) is not None:
        overrides["api_level"] = args.api_level


def _add_security_flags(serve: argparse.ArgumentParser) -> None:
    """nats-server's authentication and TLS flags, and jsraft's cluster secret and monitor token."""
    group = serve.add_argument_group("security (nats-server spellings where they exist)")
    group.add_argument("--user", help="the one user clients must authenticate as (with --pass)")
    group.add_argument("--pass", dest="password", metavar="PASSWORD", help="that user's password (plain or bcrypt)")
    group.add_argument("--auth", dest="token", metavar="TOKEN", help="a token clients must present")
    group.add_argument("--tls", action="store_true", default=None, help="TLS on the client port (needs "
                       "--tlscert and --tlskey)")
    group.add_argument("--tlscert", metavar="FILE", help="server certificate (PEM)")
    group.add_argument("--tlskey", metavar="FILE", help="server private key (PEM)")
    group.add_argument("--tlsverify", action="store_true", default=None,
                       help="require client certificates signed by --tlscacert")
    group.add_argument("--tlscacert", metavar="FILE", help="CA certificate to verify clients with (PEM)")
    group.add_argument("--cluster-secret-file", "--cluster_secret_file", dest="cluster_secret_file",
                       metavar="FILE", help="file holding the shared cluster secret every node proves when it "
                       "links (not on the command line, where ps shows it)")
    group.add_argument("--monitor-token-file", dest="monitor_token_file", metavar="FILE",
                       help="file holding a bearer token the monitoring port requires")


def _read_secret(path: str, flag: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            secret = handle.read().strip()
    except (OSError, UnicodeDecodeError) as error:
        raise InvalidConfig(f"{flag}: cannot read {path}: {getattr(error, 'strerror', None) or error}") from None
    if not secret:
        raise InvalidConfig(f"{flag}: {path} is empty")
    return secret


def security_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The security fields the command line sets (nats-server: --user/--pass/--auth/--tls…)."""
    overrides: dict[str, Any] = {}
    if args.user is not None or args.password is not None:
        if args.user is None or args.password is None or args.token is not None:
            raise InvalidConfig("--user and --pass go together, and not with --auth")
        overrides["client_auth"] = {"users": [{"user": args.user, "password": args.password}]}
    elif args.token is not None:
        overrides["client_auth"] = {"token": args.token}
    tls_flags = (args.tls, args.tlscert, args.tlskey, args.tlsverify, args.tlscacert)
    if any(flag is not None for flag in tls_flags):
        if not args.tlscert or not args.tlskey:
            raise InvalidConfig("--tls needs --tlscert and --tlskey")
        tls: dict[str, Any] = {"cert_file": args.tlscert, "key_file": args.tlskey, "verify": bool(args.tlsverify)}
        if args.tlscacert:
            tls["ca_file"] = args.tlscacert
        overrides["client_tls"] = tls
    if args.cluster_secret_file is not None:
        overrides["cluster_secret"] = _read_secret(args.cluster_secret_file, "--cluster-secret-file")
    if args.monitor_token_file is not None:
        overrides["monitor_token"] = _read_secret(args.monitor_token_file, "--monitor-token-file")
    return overrides


def overrides_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The NodeConfig fields the command line sets (unset flags are absent, so a file's value stands)."""
    overrides = {field: getattr(args, field) for field in _FIELDS if getattr(args, field) is not None}
    for field in ("client_port", "monitor_port", "cluster_port"):
        if overrides.get(field) == RANDOM_PORT:
            overrides[field] = 0
    if args.cluster is not None:
        overrides["cluster_host"], overrides["cluster_port"] = parse_cluster(args.cluster)
    if args.cluster is not None or args.cluster_port is not None:
        overrides["cluster_listen"] = True  # asked for: listen even before peers are known
    if args.peers is not None:
        peers, seeds = parse_routes(args.peers)
        overrides.update({"peers": peers} if peers else {"seed_routes": seeds})
    _api_level_override(args, overrides)
    overrides.update(security_overrides(args))
    return overrides


def config_from_args(args: argparse.Namespace) -> NodeConfig:
    overrides = overrides_from_args(args)
    jetstream = jetstream_asked(args)
    if jetstream and overrides.get("seed_routes"):
        raise InvalidConfig("--routes: a JetStream cluster needs its node's name on every route "
                            "(NAME=HOST:PORT): its Raft voters are named, and do not grow by route gossip")
    if args.config is not None:
        return NodeConfig.from_file(args.config, overrides, lambda fields: with_defaults(fields, jetstream))
    return NodeConfig.from_dict(with_defaults(overrides, jetstream))


_LEVELS = {"DEBUG": "DBG", "INFO": "INF", "WARNING": "WRN", "ERROR": "ERR", "CRITICAL": "FTL"}
_OWN_LOGGERS = (log.name, "jsraft.server.lame_duck")  # lines as nats-server's own, at INFO by default


class _NatsFormatter(logging.Formatter):
    """nats-server's line: `[pid] 2006/01/02 15:04:05.000000 [INF] message` (other loggers name themselves)."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage() if record.name in _OWN_LOGGERS else f"{record.name}: {record.getMessage()}"
        if record.exc_info:
            message += "\n" + self.formatException(record.exc_info)
        stamp = self.formatTime(record, "%Y/%m/%d %H:%M:%S") + f".{int(record.msecs * 1000):06d}"
        return f"[{record.process}] {stamp} [{_LEVELS.get(record.levelname, record.levelname)}] {message}"


def setup_logging(level: str | None) -> None:
    """`level` None: `serve`'s own lines (startup, readiness, lame duck mode, stop) and every warning, as
    nats-server's default; a level: every logger at it."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_NatsFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel((level or "warning").upper())
    for name in _OWN_LOGGERS:
        logging.getLogger(name).setLevel((level or "info").upper())


def _leaf(error: BaseException) -> BaseException:
    """The one real error inside nested exception groups (trio wraps what a nursery raises)."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error


def cmd_serve(args: argparse.Namespace, early: EarlyListener | None = None) -> int:
    """Run `serve`; `early` is the client socket bound before the imports, used if the configuration asks
    for its address (invariant 8)."""
    if args.signal is not None:  # invariant 10
        return signal_command(args.signal)
    try:
        config = config_from_args(args)
        nats_tls.check_tls_files(config)  # invariant 1: a bad certificate file is a configuration error
        jwt_auth.check_trust(config)  # and so is a bad operator or account JWT
    except InvalidConfig as error:  # invariant 1
        where = f" in {args.config}" if args.config and args.config not in str(error) else ""
        print(f"jsraft serve: configuration error{where}: {error}", file=sys.stderr)
        if early is not None:
            early.sock.close()
        return EXIT_USAGE
    setup_logging(args.log_level)
    client_socket = early.take(config.client_host, config.client_port) if early is not None else None
    gc_freeze.install()  # full collections that do not grow with the streams (runtime.gc_freeze)
    soft, hard = raise_open_file_limit()  # invariant 12
    log.debug("open-file limit %d (hard %d)", soft, hard)
    try:
        trio.run(serve, config, args.ports_file_dir, client_socket)
    except BaseException as raised:  # noqa: BLE001 — reported below, or re-raised if not ours
        error = _leaf(raised)
        if isinstance(error, (JsraftError, OSError)):
            log.error("node %s failed: %s", config.name, error)
            print(f"jsraft serve: {error}", file=sys.stderr)
            return EXIT_FAILED
        raise
    finally:
        if os.path.basename(config.store_dir) == f"{PRIVATE_PREFIX}{os.getpid()}":
            shutil.rmtree(config.store_dir, ignore_errors=True)
    return EXIT_OK


def _monitor(node: Node, config: NodeConfig) -> Any:
    """The node's monitor, or None without a monitor port: its modules (prometheus_client) are imported only
    when one is asked for, so a node without `-m` starts sooner."""
    if config.monitor_port is None:
        return None
    from jsraft.server.ops.monitor import Monitor

    return Monitor(node.monitor_parts, config.monitor_host, config.monitor_port)


async def serve(config: NodeConfig, ports_file_dir: str | None = None,
                client_socket: socket.socket | None = None) -> None:
    """Run the node (and its monitor, if configured) until SIGTERM or SIGINT (invariants 2, 4)."""
    with trio.open_signal_receiver(*HANDLED) as signals, contextlib.ExitStack() as cleanup:
        log_startup(config)
        node = Node(config)
        await node.prepare()  # a foreign store directory fails here, before any listener opens
        if config.pid_file:  # written once the store is ours, removed however this ends (invariant 9)
            cleanup.callback(PidFile(config.pid_file).write().remove)
        if client_socket is not None:  # the client listener serves it (invariant 8)
            node.clients.listeners = [trio.SocketListener(trio.socket.from_stdlib_socket(client_socket))]
        monitor = _monitor(node, config)
        node_done = trio.Event()

        async def run_node(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
            try:
                await node.run(task_status=task_status)
            finally:
                node_done.set()

        ports_file = None
        async with trio.open_nursery() as nursery:
            monitor_url = None
            if monitor is not None:
                host, port = await nursery.start(monitor.run)
                monitor_url = f"http://{host}:{port}"
                log.info("Starting http monitor on %s:%d", host, port)
            await nursery.start(run_node)
            if node.cluster_address is not None:
                log.info("Cluster %s: listening for route connections on %s:%d, peers %s", config.cluster_name,
                         *node.cluster_address, ",".join(sorted(config.peers)) or
                         (f"found from seed routes {','.join(config.seed_routes)}" if config.seed_routes else "none yet"))
            if not config.clustered:  # a cluster's meta leader needs its peers: do not wait for them here
                await node.wait_ready(timeout_s=60.0)
            if monitor is not None:
                monitor.mark_running()
            log.info("Listening for client connections on %s:%d", *node.client_address)
            if ports_file_dir is not None:
                ports_file = write_ports_file(ports_file_dir, node.url, monitor_url, node.cluster_address)
            log.info("Server is ready")
            try:
                stop = trio.Event()
                nursery.start_soon(watch_signals, signals, node, monitor, stop)
                await stop.wait()
                if monitor is not None:
                    monitor.mark_stopped()
                node.stop()
                await node_done.wait()
                nursery.cancel_scope.cancel()
            finally:
                if ports_file is not None:
                    with contextlib.suppress(OSError):
                        os.unlink(ports_file)
    log.info("node %s stopped cleanly (stores closed)", config.name)


def log_startup(config: NodeConfig) -> None:
    log.info("Starting jsraft %s (speaking nats-server %s's client protocol)", __version__, NATS_VERSION)
    log.info("  Name:     %s", config.name)
    log.info("  Store Directory: %r", config.store_dir)
    if os.path.basename(config.store_dir).startswith(PRIVATE_PREFIX):
        log.info("  JetStream was not asked for (-js): this store is private and removed when the node stops")
    elif config.store_dir == DEFAULT_STORE_DIR:
        log.warning("Temporary storage directory used, data could be lost on system reboot")


def write_ports_file(directory: str, client_url: str | None, monitor_url: str | None,
                     cluster_address: tuple[str, int] | None) -> str:
    """nats-server's ports file, `<dir>/nats-server_<pid>.ports` (the name a launcher that started
    `nats-server` looks for): `{"nats": [...], "monitoring": [...], "cluster": [...]}`, written whole
    (temp file, then rename) so a reader never sees half of it."""
    ports: dict[str, list[str]] = {"nats": [client_url] if client_url else []}
    if monitor_url is not None:
        ports["monitoring"] = [monitor_url]
    if cluster_address is not None:
        ports["cluster"] = [f"nats://{cluster_address[0]}:{cluster_address[1]}"]
    path = os.path.join(directory, f"nats-server_{os.getpid()}.ports")
    temporary = f"{path}.tmp"
    with open(temporary, "w") as file:
        json.dump(ports, file)
    os.replace(temporary, path)
    return path
