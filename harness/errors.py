"""The harness's one error tree.

::

    HarnessError
     +-- UsageError            bad command-line usage                      (exit 2)
     +-- InputError            bad user input: a file, key or value        (exit 2)
     |    +-- CaseFileError    a case file: names the file, key, value and expected type
     |    +-- ProfileError     a runner profile in runners/
     |    +-- ReportFormatError  a report.json / comparison.json we cannot read
     |    +-- UnknownMetricError  a metric name not in the registry
     +-- MetricNotRun          a metric that could not run (no CLIP model): never a pass
     +-- MediaError            a video/audio/image file that cannot be decoded
     +-- ReferenceStoreError   the reference store: missing, tampered or refused
     |    +-- NoReferenceError   no reference pinned yet for an output: bless one
     |    +-- BlessRefusedError  bless would not pin an output (harness.bless)
     +-- InfrastructureError   the harness itself could not run work          (exit 3)
          +-- WorkerError      a worker process misbehaved (protocol, start-up)

Every message names what was wrong and what was expected, so that a CI log line is enough to
fix the input without reading code.
"""

from __future__ import annotations


class HarnessError(Exception):
    """Root of every error the harness raises on purpose."""

    exit_code: int = 3


class UsageError(HarnessError):
    """The command line was wrong."""

    exit_code = 2


class InputError(HarnessError):
    """A file or value the user handed us is wrong."""

    exit_code = 2


class CaseFileError(InputError):
    """A case file is malformed; the message names the file, the key and what was expected."""

    def __init__(self, path: object, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = str(path)


class ProfileError(InputError):
    """A runner profile (``runners/*.toml``) is malformed."""


class ReportFormatError(InputError):
    """A report or comparison document has the wrong shape or an unsupported format version."""


class UnknownMetricError(InputError):
    """A metric name that is not in the registry; the message lists the known names."""


class MetricNotRun(HarnessError):
    """A metric could not be computed for a reason outside the outputs (e.g. no CLIP model).

    A check that catches this records the metric as *not run* with :attr:`reason`; it never
    counts as a pass.
    """

    exit_code = 2

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class MediaError(HarnessError):
    """A media file could not be decoded; the message names the file and the cause."""

    exit_code = 2


class ReferenceStoreError(HarnessError):
    """The reference store is missing a file, a hash does not match, or bless refused."""

    exit_code = 2


class NoReferenceError(ReferenceStoreError):
    """No reference is pinned for an output on its lookup chain (or there is no store yet):
    nothing is wrong with the store, the output has not been blessed."""


class InfrastructureError(HarnessError):
    """The harness could not do its own job (not the code under test's fault)."""

    exit_code = 3


class WorkerError(InfrastructureError):
    """A worker process broke the protocol or could not start."""
