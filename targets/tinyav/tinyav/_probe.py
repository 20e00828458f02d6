"""The harness probe, or a no-op stand-in when tinyav runs without the harness installed.

tinyav is production-style code: instrumentation must cost nothing and must not make the
harness a hard dependency.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

try:
    from harness import probe
except ImportError:  # pragma: no cover - exercised only without the harness on sys.path

    class _NoProbe:
        """Same surface as ``harness.probe``; every call does nothing."""

        @staticmethod
        @contextlib.contextmanager
        def stage(name: str) -> Iterator[None]:
            yield

        @staticmethod
        def request(request_id: str, *, rank: int | None = None) -> Any:
            return contextlib.nullcontext()

        @staticmethod
        def fingerprint(name: str, tensor_or_array: Any) -> None:
            return None

        @staticmethod
        def record_input(name: str, data_or_path: Any) -> None:
            return None

        @staticmethod
        def output(name: str, array_or_path: Any, **meta: Any) -> None:
            return None

        @staticmethod
        def note(name: str, value: Any) -> None:
            return None

        @staticmethod
        def seed() -> int | None:
            return None

        @staticmethod
        def platform() -> str | None:
            return None

        @staticmethod
        def platform_info() -> Mapping[str, Any] | None:
            return None

        @staticmethod
        def active() -> bool:
            return False

    probe = _NoProbe()  # type: ignore[assignment]

__all__ = ["probe"]
