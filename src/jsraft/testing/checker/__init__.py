"""The chaos checker (test code, issue #7, ../shared/CHAOS.md "The checker"): judges a history directory
written by the chaos harness against invariants I1-I10 and writes report.json.

Run it as `python -m jsraft.testing.checker HISTORY_DIR [--json]` (exit 0 valid, 1 violation, 2 unusable
input), or call `check(directory)` / `check_history(history)`.

Modules: `facts` (indexes derived once), `writes` (I1, I3, I4), `replicas` (I2, I6, I10), `order` (I5),
`consumers` (I7), `cluster` (I8, I9), `stats` (counts, availability, repair times), `report` (assembly
and the human summary). Production code never imports this package.
"""

from jsraft.testing.checker.report import check, check_history, summary

__all__ = ["check", "check_history", "summary"]
