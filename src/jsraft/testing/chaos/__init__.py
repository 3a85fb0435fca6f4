"""Chaos testing of real jsraft clusters (issue #7, ../shared/CHAOS.md): test code only.

Real `jsraft serve` processes, real sockets and files, faults from the outside (kills, pauses, partitions,
power cuts on the shadow disk, clock skew, at-rest corruption), workloads that record a history, and the
checker (`jsraft.testing.checker`) that judges it. Production code never imports this package.
"""
