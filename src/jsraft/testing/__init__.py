"""Test kit (never imported by production code): simulated disk, network and clock, harnesses, checkers."""
