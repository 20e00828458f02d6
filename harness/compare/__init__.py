"""Floor 6: base versus head on one runner: statistics, verdicts, the failure matrix, the
first divergent stage and bisect."""
