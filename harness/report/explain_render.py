"""The ``harness explain`` page as Markdown (:func:`explain_markdown`: printed, appended to a
comparison's ``summary.md``) and as HTML (:func:`explain_html`: the reports' offline style and
Content-Security-Policy)."""

from __future__ import annotations

from harness.report.explain import Explained, Explanation
from harness.report.markdown import md_code, md_text

# (label, attribute) of each piece of evidence, in the order the page gives them
EVIDENCE: tuple[tuple[str, str], ...] = (
    ("new or pre-existing", "origin"),
    ("infrastructure or code", "cause"),
    ("head's changed lines executed", "change"),
    ("first departure from the reference", "departure"),
    ("first divergence, base vs head", "divergence"),
    ("environment differences", "environment"),
)


def evidence(e: Explained) -> list[tuple[str, str]]:
    """The evidence of one case, as (label, text); a run has no base-vs-head divergence."""
    return [
        (label, str(getattr(e, attr))) for label, attr in EVIDENCE if getattr(e, attr) is not None
    ]


def headline(x: Explanation) -> str:
    n = len(x.cases)
    if not n:
        return f"nothing red to explain ({x.others} case(s), none red)"
    return f"{n} red case(s), most likely caused by head first; {x.others} other case(s) not red"


def explain_markdown(x: Explanation) -> str:
    """The page as Markdown (GitHub job summaries render it)."""
    lines = [f"## harness explain: {md_text(x.title)}", "", headline(x) + "."]
    for note in x.notes:
        lines += ["", f"⚠️ {md_text(note)}"]
    for i, e in enumerate(x.cases, 1):
        lines += [
            "",
            f"### {i}. {md_code(e.name, table=False)}: "
            f"{md_text(e.outcome)}: {md_text(e.likelihood)}",
            "",
        ]
        lines += [f"- **{label}**: {md_text(text)}" for label, text in evidence(e)]
    return "\n".join(lines) + "\n"


def explain_text(x: Explanation) -> str:
    """The page as plain text (a terminal, a CI log)."""
    lines = [f"harness explain: {x.title}", headline(x)]
    lines += [f"  {note}" for note in x.notes]
    for i, e in enumerate(x.cases, 1):
        lines.append(f"{i}. {e.name}: {e.outcome}: {e.likelihood}")
        lines += [f"     {label}: {text}" for label, text in evidence(e)]
    return "\n".join(lines) + "\n"


def explain_html(x: Explanation) -> str:
    """The page as a self-contained, offline HTML document."""
    from harness.report.html import environment

    return (
        environment()
        .get_template("explain.j2")
        .render(x=x, headline=headline(x), cases=[(e, evidence(e)) for e in x.cases])
    )


__all__ = ["evidence", "explain_html", "explain_markdown", "explain_text", "headline"]
