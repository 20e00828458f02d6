"""Comparison of base and head: statistics, verdicts, failure matrix, divergence.

``harness.compare.stats`` holds the pure statistics of one latency comparison (Hodges-Lehmann
shift with a distribution-free interval, exact one-sided Mann-Whitney U, the decision rule,
noise calibration, Fisher's exact test for failure counts); ``harness.compare.sequential``
holds the looks at 3, 5 and 7 rounds, the confirmation batch and the round scheduler.
"""
