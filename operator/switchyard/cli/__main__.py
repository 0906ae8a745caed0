"""`python -m switchyard.cli`: the console script's `switchyard`."""

import sys

from . import main

sys.exit(main())
