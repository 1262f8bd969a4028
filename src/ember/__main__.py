"""``python -m ember``: the ``ember`` command."""

import sys

from ember.app.cli import main

sys.exit(main())
