import sys

from experiments.bench.atari.budget import main

sys.exit(main())
