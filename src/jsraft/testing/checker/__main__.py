"""`python -m jsraft.testing.checker HISTORY_DIR [--json] [--heal-limit S]` (test code, issue #7).

Owns: the command line. Writes HISTORY_DIR/report.json, prints the human summary (or the JSON report with
--json). Exit status: 0 valid, 1 some invariant violated, 2 unusable input (missing or malformed files,
or a shape the checker cannot judge: it never turns its own failure into a "violation"); then
report.json holds {"valid": false, "unusable": "<why>"}.

Imports: stdlib, jsraft.testing.chaos.history, jsraft.testing.checker.
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from pathlib import Path

from jsraft.testing.chaos.history import REPORT_FILE, HistoryFormatError
from jsraft.testing.checker import check, summary
from jsraft.testing.checker.cluster import HEAL_TO_READY_MAX_S

EXIT_VALID, EXIT_VIOLATION, EXIT_UNUSABLE = 0, 1, 2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jsraft.testing.checker",
                                     description="Judge a chaos history directory (invariants I1-I10).")
    parser.add_argument("history_dir", type=Path)
    parser.add_argument("--json", action="store_true", help="print the JSON report instead of a summary")
    parser.add_argument("--heal-limit", type=float, default=HEAL_TO_READY_MAX_S,
                        help="I9: the most seconds from heal to ready (default %(default)s)")
    args = parser.parse_args(argv)
    if not args.history_dir.is_dir():
        print(f"checker: {args.history_dir}: not a directory", file=sys.stderr)
        return EXIT_UNUSABLE
    try:
        report = check(args.history_dir, heal_to_ready_max_s=args.heal_limit)
    except Exception as exc:  # noqa: BLE001 - a history the checker cannot judge is never "a violation"
        why = str(exc) if isinstance(exc, HistoryFormatError) else f"checker error: {exc!r}"
        (args.history_dir / REPORT_FILE).write_text(json.dumps({"valid": False, "unusable": why}) + "\n")
        print(f"checker: unusable history: {why}", file=sys.stderr)
        if not isinstance(exc, HistoryFormatError):
            traceback.print_exc()
        return EXIT_UNUSABLE
    text = json.dumps(report, indent=1, allow_nan=False)
    (args.history_dir / REPORT_FILE).write_text(text + "\n")
    print(text if args.json else summary(report))
    return EXIT_VALID if report["valid"] else EXIT_VIOLATION


if __name__ == "__main__":
    sys.exit(main())
