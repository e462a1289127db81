"""`python -m wattlog.cli`: the wattlog command, as the `wattlog` script runs it."""

import sys

from wattlog.cli import main

sys.exit(main())
