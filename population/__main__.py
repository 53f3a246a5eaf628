"""`python -m population ...` (and `torchrun ... -m population ...`): see
population/population.py."""

import sys

from population.population import main

sys.exit(main())
