"""Main's history: run folders ingested into an embedded SQLite database, change points per
series, a static site, and latency budgets proposed from the data.

One module per stage of its data flow::

    run folders --ingest--> history.db (db: schema; extract: a report's rows, pure)
        --series--> one series per (runner class, host platform, case, stage|check|pass rate)
        --detect--> change points (Apache Otava's E-Divisive means with a t-test)
        --> check (new change points, first divergence, the bisect that pins each)
        --> site (index + a page per case, inline SVG)
        --> baselines (proposed [budgets] for a runner profile, as a diff)

Example::

    with open_db(Path("history.db")) as db:
        ingest(db, [Path("reports/merged")])
"""

from __future__ import annotations
