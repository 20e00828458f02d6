"""Put the bundled target (and the repo root, for ``harness.probe``) on sys.path."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TARGET = ROOT / "targets" / "tinyav"

for p in (TARGET, ROOT):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))
