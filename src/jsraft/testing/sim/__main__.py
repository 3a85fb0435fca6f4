"""`python -m jsraft.testing.sim`: see `cli`."""

import sys

from jsraft.testing.sim.cli import main

sys.exit(main())
