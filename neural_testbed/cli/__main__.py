"""``python -m neural_testbed.cli``: the ``neural-testbed`` command."""

import sys

from neural_testbed.cli import main

sys.exit(main())
