"""``python -m harness.worker``: see :mod:`harness.worker.main`."""

import sys

from harness.worker.main import main

sys.exit(main())
