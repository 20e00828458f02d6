"""``python -m tinyav.serve --port P [--host H] [--tp N] [--quant bf16|int8|fp8]``."""

from __future__ import annotations

import os
import sys

from tinyav.serve.cli import main

if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    if "coverage" in sys.modules:  # its data is written at interpreter exit
        sys.exit(code)
    # Every rank is stopped and reaped, the work folder removed, the logs flushed: skip the
    # interpreter's teardown, whose final garbage collection over torch's, FastAPI's and
    # pydantic's objects was most of each stop (1-5 s on a loaded 2-core VM; py-spy:
    # gc_collect_main under Py_FinalizeEx).
    os._exit(code)
