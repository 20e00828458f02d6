"""Floor 6: comparison of base and head on one runner.

Public entry points:

- :func:`harness.compare.run.compare_revisions` (``harness compare --base --head``): both
  revisions checked out as git worktrees, run interleaved, judged -> a
  :class:`~harness.model.Comparison` (also written as ``comparison.json`` + ``summary.md``);
- :func:`harness.compare.envs.compare_environments` (``harness compare --base-env --head-env``):
  one revision under two Python environments, through the same engine
  (:func:`harness.compare.run.run_live`), plus the environment difference;
- :func:`harness.compare.saved.compare_reports` (``harness compare BASE_DIR HEAD_DIR``);
- :func:`harness.compare.bisect.bisect` (``harness bisect``).

Stages: ``stats`` (pure statistics: the one-stage test, Holm, alpha spending) and
``sequential`` (round scheduling for looks at 3/5/7 rounds and confirmation batches);
``session`` carries the rounds out over a paired runner; ``latency``,
``quality``, ``failures`` and ``divergence`` are the three findings and the first divergence;
``judge`` combines them into one case verdict; ``noise`` stores and reads A/A calibration;
``worktree`` checks revisions out; ``envdiff`` says what differs between two environments.
"""
