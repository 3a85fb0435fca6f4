"""`free_ports`: ports a test cluster keeps across a node's restart, outside the OS's ephemeral range.

Method: read the kernel's ephemeral range the way the picker does, pick ports, and check each is outside
that range, distinct, and bindable right after; a restarted node's bind must not race an outgoing
connection that the OS gave the same port (a CI failure: "address in use" on a restarted node's cluster
port that a client connection had taken meanwhile).
"""

from __future__ import annotations

import socket

from jsraft.cli.local_cluster import ephemeral_range, free_ports
from jsraft.testing.chaos.cluster import free_ports as chaos_free_ports


def test_ports_are_distinct_bindable_and_below_theephemeral_range():
    low, high = ephemeral_range()
    assert low < high
    ports = free_ports(20)
    assert len(set(ports)) == 20
    if low > 11000:  # room below the range (every Linux default): the picker stays out of it
        assert all(port < low for port in ports), (ports, low)
    for port in ports:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def test_chaos_cluster_ports_follow_the_same_rule():
    low, _high = ephemeral_range()
    ports = chaos_free_ports(["127.0.0.1"] * 5)
    assert len(set(ports)) == 5
    if low > 11000:
        assert all(port < low for port in ports), (ports, low)
