"""Partitions with kernel packet filtering: a private network namespace and `nft` drop rules.

Owns: running a command inside a fresh network namespace (`unshare -n`, loopback brought up: every
127.0.0.0/8 address is then local, so nodes listen on 127.0.0.11, .12, ...), and `NftPartitioner`, the
`net.LinkControl` whose cut of the directed link `(src, dst)` is an nft rule dropping every packet from
src's address to dst's (hook `output`: loopback traffic passes it once). Nodes must bind their outgoing
sockets to their own address (the harness's `hosts`), or their packets leave from 127.0.0.1 and no rule
matches. Client traffic (from 127.0.0.1) is never matched.

Tried on this machine (Debian 12, kernel 6.x, root): `unshare -n` works; `nft` comes from
`apt-get install -y nftables` (1.0.6) and works inside the namespace; `tc netem` does not exist in this
kernel, so delays are the relay's job (`chaos.relay`), and `NftPartitioner.delay` refuses.

Invariants:
  1. Rules are only installed in a private network namespace (not the host's: `allow_host_namespace`
     overrides it for a throwaway machine), in one table of their own (`NFT_TABLE`), replaced
     atomically (`nft -f` of "flush chain + add rules") on every change.
  2. Cleanup: `close()` deletes the table; the namespace itself, with any rule left, disappears when its
     last process exits, and `unshare --kill-child` kills the command when `unshare` dies (Ctrl-C
     included, or a test's timeout killing it), so nothing outlives the run.
  3. Modes: "blackhole" drops (a lost packet, connects time out); "reject" answers TCP with a reset
     (connections refused or reset) and drops the rest. While any link is in reject mode, TCP resets
     pass every link (the reset a reject makes is sent from dst to src, a link that is usually cut too).

Imports: stdlib, jsraft.errors, chaos.net (test code). Run as `python -m jsraft.testing.chaos.netns --
CMD...` it is the in-namespace launcher: loopback up, then exec CMD.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

from jsraft.errors import invariant
from jsraft.testing.chaos.net import FaultsLog, Link, LinkControl

NFT_TABLE = "jsraft_chaos"
ENV_MARKER = "JSRAFT_CHAOS_NETNS"  # the inode of the namespace the launcher made and checked
COMMAND_TIMEOUT_S = 10.0
INIT_NETNS_INODE = 0xEFFFFFF9  # the kernel's fixed inode of the initial namespace (PROC_NET_INIT_INO)


def default_addresses(nodes: Sequence[str]) -> dict[str, str]:
    """127.0.0.11, .12, ... in node order."""
    invariant(len(nodes) <= 200, "at most 200 nodes get an address of their own")
    return {node: f"127.0.0.{11 + index}" for index, node in enumerate(nodes)}


def netns_inode() -> int:
    return os.stat("/proc/self/ns/net").st_ino


def in_private_netns() -> bool:
    """Is this process in a network namespace made for the chaos run? Yes if the launcher (`main`) marked
    this very namespace; else compare with pid 1's namespace (unreadable in some sandboxes: then no)."""
    try:
        own = netns_inode()
    except OSError:
        return False
    if os.environ.get(ENV_MARKER) == str(own):
        return True
    try:
        return own != os.stat("/proc/1/ns/net").st_ino
    except OSError:
        return False


def unavailable_reason() -> str | None:
    """Why the namespace mode cannot run here, or None when `unshare -n` and nft inside it both work."""
    for tool in ("unshare", "nft", "ip"):
        if shutil.which(tool) is None:
            hint = " (apt-get install -y nftables)" if tool == "nft" else ""
            return f"{tool} is not installed{hint}"
    probe = f"ip link set lo up && nft add table inet {NFT_TABLE} && nft list tables"
    try:
        result = subprocess.run(["unshare", "-n", "sh", "-c", probe], capture_output=True, text=True,
                                timeout=COMMAND_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unshare -n failed: {exc}"
    if result.returncode != 0:
        return f"unshare -n / nft failed: {result.stderr.strip() or result.returncode}"
    return None


def netns_argv(argv: Sequence[str]) -> list[str]:
    """The command line that runs `argv` in a new network namespace, loopback up (see `main`)."""
    return ["unshare", "--net", "--kill-child", sys.executable, "-m", "jsraft.testing.chaos.netns",
            "--parent-netns", str(netns_inode()), "--", *argv]


def run_in_netns(argv: Sequence[str], *, timeout_s: float, **options: Any) -> subprocess.CompletedProcess:
    """Run `argv` in a fresh namespace and wait (at most `timeout_s`; on timeout `unshare` is killed and,
    through `--kill-child`, the command with it)."""
    return subprocess.run(netns_argv(argv), timeout=timeout_s, **options)


def reexec_in_netns() -> None:
    """Make the rest of this program run in a private namespace: returns at once if it already does
    (the launcher's marker is set), else replaces this process with itself under `unshare -n`."""
    if in_private_netns():
        return
    reason = unavailable_reason()
    invariant(reason is None, f"the network namespace mode is unavailable: {reason}")
    argv = netns_argv([sys.executable, *sys.argv])
    os.execvp(argv[0], argv)


def lo_up() -> None:
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True, timeout=COMMAND_TIMEOUT_S)


def main(argv: Sequence[str]) -> None:
    """In-namespace launcher: `--parent-netns INODE -- CMD...` (as `netns_argv` writes it): check this is
    not the parent's namespace, bring loopback up, mark the namespace (`ENV_MARKER`), exec CMD."""
    args = list(argv)
    if len(args) < 4 or args[0] != "--parent-netns" or args[2] != "--" or not args[1].isdigit():
        sys.exit("usage: python -m jsraft.testing.chaos.netns --parent-netns INODE -- CMD [ARG...]")
    own = netns_inode()
    if own in (int(args[1]), INIT_NETNS_INODE):
        sys.exit("refusing to run in the parent's network namespace (run it under `unshare -n`)")
    lo_up()
    os.environ[ENV_MARKER] = str(own)
    os.execvp(args[3], args[3:])


class NftPartitioner(LinkControl):
    """`LinkControl` by nft rules between the nodes' own addresses; see the module docstring."""

    def __init__(self, addresses: dict[str, str], *, faults_log: FaultsLog | None = None,
                 default_mode: str = "blackhole", table: str = NFT_TABLE,
                 allow_host_namespace: bool = False) -> None:
        super().__init__(list(addresses), faults_log=faults_log, default_mode=default_mode)
        invariant(allow_host_namespace or in_private_netns(),
                  "nft rules go into a private network namespace only (invariant 1); see reexec_in_netns")
        invariant(len(set(addresses.values())) == len(addresses), "each node needs an address of its own")
        self.addresses = dict(addresses)
        self.table = table
        self._closed = False
        # Start from an empty table of our own: "add" first so that "delete" never fails.
        self._nft(f"add table inet {table}\ndelete table inet {table}\nadd table inet {table}\n"
                  f"add chain inet {table} out {{ type filter hook output priority 0; policy accept; }}\n")

    def _nft(self, script: str) -> None:
        result = subprocess.run(["nft", "-f", "-"], input=script, capture_output=True, text=True,
                                timeout=COMMAND_TIMEOUT_S)
        if result.returncode != 0:
            raise RuntimeError(f"nft failed ({result.returncode}): {result.stderr.strip()}\n{script}")

    def _rules(self, link: Link, mode: str) -> list[str]:
        match = f"ip saddr {self.addresses[link[0]]} ip daddr {self.addresses[link[1]]}"
        rules = [f"{match} meta l4proto tcp reject with tcp reset"] if mode == "reject" else []
        return rules + [f"{match} drop"]

    def _apply_many(self, changes: dict[Link, str | None]) -> None:
        invariant(not self._closed, "the partitioner is closed")
        cut = dict(self._cut)
        for link, mode in changes.items():
            if mode is None:
                cut.pop(link, None)
            else:
                cut[link] = mode
        # One script, one transaction: the old rule set is replaced by the new one at once.
        lines = [f"flush chain inet {self.table} out"]
        if "reject" in cut.values():
            # The reset a reject rule makes travels the reverse link, itself cut: let resets through.
            lines.append(f"add rule inet {self.table} out tcp flags & rst == rst accept")
        for link, mode in sorted(cut.items()):
            lines += [f"add rule inet {self.table} out {rule}" for rule in self._rules(link, mode)]
        self._nft("\n".join(lines) + "\n")

    def ruleset(self) -> str:
        """The table as nft lists it (for logs and tests)."""
        result = subprocess.run(["nft", "list", "table", "inet", self.table], capture_output=True, text=True,
                                timeout=COMMAND_TIMEOUT_S)
        return result.stdout

    def delay(self, src: str, dst: str, ms: float, jitter_ms: float = 0.0) -> None:
        raise NotImplementedError("no tc netem in this kernel: delays need the relay (make_network('relay'))")

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        subprocess.run(["nft", "delete", "table", "inet", self.table], capture_output=True,
                       timeout=COMMAND_TIMEOUT_S)


if __name__ == "__main__":
    main(sys.argv[1:])
