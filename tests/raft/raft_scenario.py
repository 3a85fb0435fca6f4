"""Interpreter for the Raft scenario scripts in `tests/raft/scenarios/*.txt` (etcd datadriven style).

Method: a script is a sequence of blocks, each a command line, a `----` line and the golden output,
ended by a blank line; `#` lines between blocks are comments. `run_script` executes every command against
a `raft_network.Cluster` and returns the script text with the actual outputs, which the test compares with
the file (or writes back with `--rewrite`). Nodes are named by number (`2` is `n2`).

Commands:
  add-nodes N [key=value...]      a fresh group n1..nN (config keys: pre-vote, check-quorum, election,
                                  heartbeat, inflight, max-entries, chunk, catchup, learners=4,5)
  add-node N                      a blank node, not a member, waiting to be added
  campaign N                      start an election on N, then stabilize
  propose N DATA                  propose on N (no delivery); N may be `leader`
  propose-conf-change N OP M      OP is add-voter, add-learner, promote-learner, remove-node
  transfer-leadership N M         ask leader N to hand over to M
  read-index N CTX                ask leader N for a read barrier
  compact N                       N's application snapshots at its applied index; the log is compacted
  tick N COUNT                    tick N COUNT times (messages wait for the next stabilize)
  run COUNT                       COUNT rounds of: tick every live node, stabilize (events only)
  stabilize                       deliver until quiet, printing every delivered message
  partition (1)(2,3) / heal       cut / restore the network
  crash N / restart N [uuid-changed]
  wipe N                          N's data directory is replaced by an empty one (new storage UUID)
  corrupt N index=I [term=T]      a record of N's durable WAL is found corrupt at recovery
  truncate-log N to=I             N's durable WAL lost every entry above I
  roll-back N from=I to=J         N's entries I..J revert to older versions it once held (CRC-valid)
  accept-data-loss N              the operator command
  status [N] / log N / app N / conf N / storage N   inspect
"""

from __future__ import annotations

import re

from raft_network import Cluster, StorageState, describe_entry, describe_message, node_name

from jsraft.errors import JsraftError
from jsraft.raft import ConfChange, ConfChangeType, Snapshot

_CONFIG_KEYS = {
    "pre-vote": ("pre_vote", lambda v: v == "true"),
    "check-quorum": ("check_quorum", lambda v: v == "true"),
    "election": ("election_ticks", int),
    "heartbeat": ("heartbeat_ticks", int),
    "inflight": ("max_inflight_msgs", int),
    "max-entries": ("max_entries_per_msg", int),
    "chunk": ("snapshot_chunk_bytes", int),
    "catchup": ("learner_catchup_entries_max", int),
}


def parse_script(text: str) -> list[tuple[list[str], str, list[str]]]:
    """Blocks of (leading comment lines, command, golden output lines)."""
    lines = text.splitlines()
    blocks: list[tuple[list[str], str, list[str]]] = []
    comments: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip() or line.startswith("#"):
            comments.append(line)
            i += 1
            continue
        assert i + 1 < len(lines) and lines[i + 1] == "----", f"line {i + 1}: command without ----"
        output: list[str] = []
        i += 2
        while i < len(lines) and lines[i].strip():
            output.append(lines[i])
            i += 1
        i += 1  # the blank line that ends the block
        blocks.append((comments, line, output))
        comments = []
    if comments:
        blocks.append((comments, "", []))
    return blocks


def run_script(text: str) -> str:
    runner = ScenarioRunner()
    out: list[str] = []
    for comments, command, _ in parse_script(text):
        out.extend(comments)
        if command:
            out.append(command)
            out.append("----")
            out.extend(runner.execute(command) or ["ok"])
            out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


class ScenarioRunner:
    def __init__(self) -> None:
        self.cluster: Cluster | None = None

    def execute(self, command: str) -> list[str]:
        name, *args = command.split()
        handler = getattr(self, "cmd_" + name.replace("-", "_"), None)
        assert handler is not None, f"unknown command {name}"
        try:
            return handler(*args)
        except JsraftError as error:
            return [f"error: {type(error).__name__}: {error}"]

    @property
    def c(self) -> Cluster:
        assert self.cluster is not None, "add-nodes first"
        return self.cluster

    def _events(self) -> list[str]:
        return self.c.take_events()

    # --- Building ---------------------------------------------------------------------------------

    def cmd_add_nodes(self, count: str, *options: str) -> list[str]:
        config: dict[str, object] = {}
        learners: list[str] = []
        for option in options:
            key, value = option.split("=", 1)
            if key == "learners":
                learners = [node_name(v) for v in value.split(",")]
                continue
            field, convert = _CONFIG_KEYS[key]
            config[field] = convert(value)
        voters = [f"n{i}" for i in range(1, int(count) + 1) if f"n{i}" not in learners]
        self.cluster = Cluster(voters, learners=learners, config=config)
        return ["ok"]

    def cmd_add_node(self, node: str) -> list[str]:
        self.c.add_node(node_name(node))
        return ["ok"]

    # --- Inputs -------------------------------------------------------------------------------------

    def cmd_campaign(self, node: str) -> list[str]:
        node_id = node_name(node)
        self.c.nodes[node_id].campaign()
        self.c._observe(node_id)
        return self._stabilize()

    def cmd_propose(self, node: str, data: str) -> list[str]:
        """`propose leader X` proposes on whichever node currently leads."""
        node_id = self.c.leader() if node == "leader" else node_name(node)
        assert node_id is not None, "no leader"
        index = self.c.nodes[node_id].propose(data.encode())
        return [f"{node_id}: index {index}" if node == "leader" else f"index {index}"]

    def cmd_propose_conf_change(self, node: str, op: str, target: str) -> list[str]:
        change = ConfChange(type=ConfChangeType[op.upper().replace("-", "_")], node_id=node_name(target))
        index = self.c.nodes[node_name(node)].propose_conf_change(change)
        return [f"index {index}"]

    def cmd_transfer_leadership(self, node: str, target: str) -> list[str]:
        self.c.nodes[node_name(node)].transfer_leadership(node_name(target))
        return ["ok"]

    def cmd_read_index(self, node: str, ctx: str) -> list[str]:
        self.c.nodes[node_name(node)].read_index(ctx.encode())
        return ["ok"]

    def cmd_compact(self, node: str) -> list[str]:
        node_id = node_name(node)
        app = self.c.apps[node_id]
        self.c.nodes[node_id].compact(app.applied_index, app.snapshot_data())
        self._persist_compaction(node_id)
        return [f"snapshot at {app.applied_index}"]

    def _persist_compaction(self, node_id: str) -> None:
        """The driver's part of compaction: store the snapshot durably, then drop the WAL prefix."""
        node = self.c.nodes[node_id]
        storage = self.c.storages[node_id]
        assert node.snapshot_meta is not None and node.snapshot_data is not None
        for state in (storage.written, storage.durable):
            state.snapshot = Snapshot(meta=node.snapshot_meta, data=node.snapshot_data)
            state.entries = [e for e in state.entries if e.index > node.snapshot_meta.index]

    def cmd_tick(self, node: str, count: str) -> list[str]:
        self.c.tick(node_name(node), int(count))
        return self._events()

    def cmd_run(self, count: str) -> list[str]:
        self.c.run(int(count))
        return self._events()

    def cmd_stabilize(self) -> list[str]:
        return self._stabilize()

    def _stabilize(self) -> list[str]:
        cluster = self.c
        cluster.trace = True
        try:
            cluster.stabilize()
        finally:
            cluster.trace = False
        return self._events()

    def cmd_partition(self, spec: str) -> list[str]:
        groups = re.findall(r"\(([^)]*)\)", spec)
        self.c.partition = [{node_name(t) for t in g.split(",") if t} for g in groups]
        return ["ok"]

    def cmd_heal(self) -> list[str]:
        self.c.partition = None
        return ["ok"]

    def cmd_crash(self, node: str) -> list[str]:
        self.c.crash(node_name(node))
        return ["ok"]

    def cmd_restart(self, node: str, *flags: str) -> list[str]:
        node_id = node_name(node)
        if "uuid-changed" in flags:
            self.c.storages[node_id].storage_uuid_changed = True
        self.c.restart(node_id)
        return [*self._events(), *self.cmd_status(node)]

    def cmd_corrupt(self, node: str, *options: str) -> list[str]:
        kv = dict(o.split("=", 1) for o in options)
        term = int(kv["term"]) if "term" in kv else None
        self.c.storages[node_name(node)].corrupt(int(kv["index"]), term)
        return ["ok"]

    def cmd_roll_back(self, node: str, *options: str) -> list[str]:
        kv = dict(o.split("=", 1) for o in options)
        done = self.c.storages[node_name(node)].roll_back(int(kv["from"]), int(kv["to"]))
        return ["ok" if done else "no older self-consistent versions to roll back to"]

    def cmd_truncate_log(self, node: str, option: str) -> list[str]:
        self.c.storages[node_name(node)].truncate_log(int(option.removeprefix("to=")))
        return ["ok"]

    def cmd_wipe(self, node: str) -> list[str]:
        """N's data directory is replaced by an empty one with a new storage UUID (restart it after)."""
        storage = self.c.storages[node_name(node)]
        storage.written = StorageState()
        storage.durable = StorageState()
        storage.storage_uuid_changed = True
        return ["ok"]

    def cmd_accept_data_loss(self, node: str) -> list[str]:
        accepted = self.c.nodes[node_name(node)].accept_data_loss()
        self.c._observe(node_name(node))
        return [f"accepted={str(accepted).lower()}", *self._events(), *self.cmd_status(node)]

    # --- Inspecting ---------------------------------------------------------------------------------

    def cmd_status(self, *nodes: str) -> list[str]:
        names = [node_name(n) for n in nodes] or sorted(self.c.nodes)
        out: list[str] = []
        for node_id in names:
            s = self.c.nodes[node_id].status()
            down = " (down)" if node_id in self.c.down else ""
            # The vote fence, shown only while it covers the current term (above it, it is moot).
            fence = self.c.nodes[node_id].vote_fence_term
            fenced = f" fenced-through={fence}" if fence >= s.current_term else ""
            out.append(
                f"{node_id}{down}: {s.role} term={s.current_term} vote={s.voted_for or '-'}{fenced} "
                f"leader={s.leader_id or '-'} commit={s.commit_index} applied={s.applied_index} "
                f"last={s.last_index} snap={s.snapshot_index} wm={s.acked_watermark} faulty={s.faulty_count} "
                f"repairing={'yes' if s.repairing else 'no'}")
            if s.repair_reason:
                out.append(f"  repair: {s.repair_reason}")
            if s.halted_reason:
                out.append(f"  {s.halted_reason}")
        return out

    def cmd_log(self, node: str) -> list[str]:
        log = self.c.nodes[node_name(node)].log
        out = [f"snapshot {log.snapshot_index}/{log.snapshot_term}"]
        for entry in log.entries:
            mark = " FAULTY" if entry.index in log.faulty else ""
            out.append((f"{entry.index}/? faulty" if mark else describe_entry(entry)))
        return out

    def cmd_storage(self, node: str) -> list[str]:
        storage = self.c.storages[node_name(node)]
        durable = storage.durable
        faulty = ",".join(map(str, sorted(durable.faulty))) or "-"
        return [f"durable: snap={durable.snapshot_index} last={durable.last_index} faulty={faulty} "
                f"wm={durable.hard_state.acked_watermark} repairing={durable.hard_state.repairing}",
                f"truncations={storage.truncations or '-'} rewrites={storage.rewrites or '-'}"]

    def cmd_conf(self, node: str) -> list[str]:
        s = self.c.nodes[node_name(node)].status()
        return [f"voters={','.join(s.voters) or '-'} learners={','.join(s.learners) or '-'}"]

    def cmd_app(self, node: str) -> list[str]:
        app = self.c.apps[node_name(node)]
        return [f"applied={app.applied_index} values={','.join(app.values) or '-'}"]


__all__ = ["ScenarioRunner", "describe_message", "parse_script", "run_script"]
