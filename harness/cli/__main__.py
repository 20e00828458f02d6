"""``python -m harness.cli``."""

import sys

from harness.cli import main

sys.exit(main())
