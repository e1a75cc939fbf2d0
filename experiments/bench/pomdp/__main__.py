import sys

from experiments.bench.pomdp.budget import main

sys.exit(main())
