"""``python -m experiments.bench.pomdp``: :mod:`experiments.bench.pomdp.budget`."""

import sys

from experiments.bench.pomdp.budget import main

sys.exit(main())
