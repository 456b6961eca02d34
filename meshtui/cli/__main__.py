"""``python -m meshtui.cli``: the same as the ``meshtui`` console script."""

import sys

from meshtui.cli import main

sys.exit(main())
