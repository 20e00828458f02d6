"""``python -m tinyav.serve --port P [--host H] [--tp N] [--quant bf16|int8|fp8]``."""

from __future__ import annotations

import sys

from tinyav.serve.cli import main

if __name__ == "__main__":
    sys.exit(main())
