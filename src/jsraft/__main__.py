"""`python -m jsraft` runs the `jsraft` command."""

import sys

from jsraft.cli import main

sys.exit(main())
