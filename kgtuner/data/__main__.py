"""Entry point of ``python -m kgtuner.data``."""

import sys

from kgtuner.data.cli import main

sys.exit(main())
