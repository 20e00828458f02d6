"""The planted synthetic history the tests share (conftest.py builds it once per session)."""

# a +20 % step of case-00's stages at run 30, a flaky period of case-01 (runs 12-20)
STEP_AT = 30
RUNS = 45
