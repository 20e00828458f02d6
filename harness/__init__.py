"""CI regression and platform validation harness for diffusion and video-generation stacks.

The public face is small: the :mod:`harness.probe` API that targets call, the ``harness``
command, and the pytest plugin. Importing this package imports nothing heavy (no torch).
"""

from __future__ import annotations

from harness import probe

__all__ = ["__version__", "probe"]
__version__ = "0.1.0"
