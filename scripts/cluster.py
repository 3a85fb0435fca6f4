#!/usr/bin/env python3
"""A thin wrapper around `jsraft cluster` (kept for scripts that call it by path; see
`src/jsraft/cli/cluster_cmd.py` for what it does):

    python scripts/cluster.py up --nodes 3 --dir D [--port 4222] [--cluster-name local] [--timeout 30]
    python scripts/cluster.py status --dir D
    python scripts/cluster.py down --dir D [--timeout 15]
"""

from __future__ import annotations

import sys

from jsraft.cli import main

if __name__ == "__main__":
    sys.exit(main(["cluster", *sys.argv[1:]]))
