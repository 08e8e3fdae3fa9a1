"""``python -m kgtuner.analysis``: see :mod:`kgtuner.analysis.cli`."""

import sys

from kgtuner.analysis.cli import main

sys.exit(main())
