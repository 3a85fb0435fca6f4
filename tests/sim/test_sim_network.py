"""`SimNetwork` and `SimClock` semantics: partitions of each shape, in-flight loss, delay, duplication, skew.

Method: send small `TimeoutNow` messages (any message type will do: the network only reads from/to/term)
between named nodes, step simulated time with `due(now)`, and assert exactly which arrive and in what
order. Randomness is a seeded `random.Random`, so each assertion is exact.
"""

from __future__ import annotations

import random

from jsraft.raft import TimeoutNow
from jsraft.testing.sim import SimClock, SimNetwork

NODES = ("n1", "n2", "n3")


def msg(src: str, dst: str, term: int = 1) -> TimeoutNow:
    return TimeoutNow(from_id=src, to_id=dst, term=term)


def net(**options: float) -> SimNetwork:
    return SimNetwork(random.Random(7), NODES, **options)  # type: ignore[arg-type]


def pairs(messages) -> set[tuple[str, str]]:
    return {(m.from_id, m.to_id) for m in messages}


def send_all(network: SimNetwork, now: int = 0) -> None:
    for a in NODES:
        for b in NODES:
            if a != b:
                network.send(msg(a, b), now)


def test_healthy_network_delivers_everything_after_one_tick() -> None:
    network = net()
    send_all(network)
    assert network.due(0) == []
    assert len(pairs(network.due(1))) == 6


def test_symmetric_partition_cuts_both_ways_between_groups_only() -> None:
    network = net()
    network.partition([{"n1", "n2"}, {"n3"}])
    send_all(network)
    assert pairs(network.due(1)) == {("n1", "n2"), ("n2", "n1")}


def test_isolate_cuts_one_node_from_everyone() -> None:
    network = net()
    network.isolate("n2")
    send_all(network)
    assert pairs(network.due(1)) == {("n1", "n3"), ("n3", "n1")}


def test_one_way_cut_is_asymmetric() -> None:
    network = net()
    network.cut_one_way("n1", "n2")
    send_all(network)
    delivered = pairs(network.due(1))
    assert ("n1", "n2") not in delivered and ("n2", "n1") in delivered
    assert len(delivered) == 5
    assert network.linked_both_ways("n1", NODES) == {"n3"}


def test_bridge_cuts_the_two_ends_but_both_reach_the_bridge() -> None:
    network = net()
    network.bridge("n1", "n3")
    send_all(network)
    assert pairs(network.due(1)) == {("n1", "n2"), ("n2", "n1"), ("n3", "n2"), ("n2", "n3")}


def test_a_cut_drops_messages_already_in_flight_and_heal_restores() -> None:
    network = net()
    network.send(msg("n1", "n2"), 0)
    network.isolate("n2")
    assert network.due(5) == []
    network.heal()
    network.send(msg("n1", "n2"), 5)
    assert pairs(network.due(6)) == {("n1", "n2")}


def test_swizzle_cuts_nodes_one_at_a_time_then_restores_them_all() -> None:
    network = net()
    network.start_swizzle()
    steps, isolated_counts = [], []
    while network.swizzling():
        steps.append(network.swizzle_step())
        isolated_counts.append(sum(1 for n in NODES if not network.linked_both_ways(n, NODES)))
        assert len(steps) < 20
    assert [s.split()[1] for s in steps] == ["cut", "cut", "restore", "restore"]
    # One node cut off, then two (all three are then alone), then one left, then none.
    assert isolated_counts == [1, 3, 1, 0]
    assert network.cut == set()


def test_drop_and_duplicate_rates_are_applied() -> None:
    lossy = net(drop=1.0)
    send_all(lossy)
    assert lossy.due(10) == [] and lossy.dropped == 6
    doubled = net(duplicate=1.0)
    doubled.send(msg("n1", "n2"), 0)
    assert len(doubled.due(1)) == 2


def test_random_delays_reorder_messages_on_one_link() -> None:
    network = net(delay_max_ticks=5, reorder=0.5)
    for term in range(1, 40):
        network.send(msg("n1", "n2", term), 0)
    terms = [m.term for m in network.due(100)]
    assert sorted(terms) == list(range(1, 40)) and terms != sorted(terms)


def test_same_seed_same_deliveries() -> None:
    def run() -> list[int]:
        network = SimNetwork(random.Random(3), NODES, drop=0.2, duplicate=0.2, delay_max_ticks=4, reorder=0.2)
        for term in range(1, 60):
            network.send(msg("n1", "n3", term), term // 3)
        return [m.term for m in network.due(1000)]

    assert run() == run()


def test_clock_skew_is_bounded_and_uniform_ends_it() -> None:
    clock = SimClock({"fast": 1.3, "slow": 0.7, "even": 1.0})
    totals = {"fast": 0, "slow": 0, "even": 0}
    for _ in range(100):
        clock.advance()
        for node in totals:
            totals[node] += clock.ticks_for(node)
    assert clock.now == 100
    assert abs(totals["fast"] - 130) <= 1 and abs(totals["slow"] - 70) <= 1 and totals["even"] == 100
    clock.uniform()
    clock.advance()
    assert [clock.ticks_for(n) for n in totals] == [1, 1, 1]
