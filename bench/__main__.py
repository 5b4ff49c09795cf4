"""``python -m bench``: the benchmark harness (bench/run.py)."""

import sys

from bench.run import main

sys.exit(main())
