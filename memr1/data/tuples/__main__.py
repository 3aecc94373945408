"""Entry point of ``python -m memr1.data.tuples``; see ``memr1.data.tuples.cli``."""

import sys

from memr1.data.tuples.cli import main

if __name__ == "__main__":
    sys.exit(main())
