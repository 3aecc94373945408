"""Entry point of ``python -m memr1.tuples``; see ``memr1.tuples.cli``."""

import sys

from memr1.tuples.cli import main

if __name__ == "__main__":
    sys.exit(main())
