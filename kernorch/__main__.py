"""``python -m kernorch`` runs the command-line interface."""

import sys

from kernorch.cli import main

sys.exit(main())
