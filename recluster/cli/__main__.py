"""`python -m recluster.cli`: the `recluster` command."""

import sys

from recluster.cli import main

sys.exit(main())
