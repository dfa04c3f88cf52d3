"""The HTML page's charts, drawn by matplotlib as inline SVG: the page needs no network to open.

matplotlib is imported only when a page is drawn: it is heavy, and the terminal report and the
JSON and Parquet outputs never need it.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

from delegate.core.timefmt import human_timeout
from delegate.report.common import Report

TICK_STEPS = (1, 5, 10, 30, 60, 300, 600, 900, 1800, 3600, 7200, 21600, 43200, 86400)
FIGURE_SIZE = (7, 3)  # inches; the page scales the SVG to its column


def _svg(figure: Any) -> str:
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", bbox_inches="tight")
    text = buffer.getvalue()
    return text[text.find("<svg") :]  # drop the XML prolog: it is inline in HTML


def _tick_step(longest: float, ticks: int = 7) -> float:
    """A step in round units (seconds, minutes, hours, days) giving at most `ticks` ticks."""
    for step in TICK_STEPS:
        if longest / step <= ticks:
            return step
    return 86400 * (longest // (86400 * ticks) + 1)


def _tick(seconds: float) -> str:
    return "0" if seconds <= 0 else human_timeout(seconds)


def _durations(ax: Any, report: Report) -> None:
    """A histogram of the ended jobs' durations, its ticks in round units."""
    from matplotlib.ticker import FuncFormatter, MaxNLocator, MultipleLocator  # heavy: see top

    durations = [j["duration_s"] for j in report.jobs if j["duration_s"] is not None]
    ax.hist(durations or [0], bins=30, color="#4c72b0")
    ax.xaxis.set_major_locator(MultipleLocator(_tick_step(max(durations, default=0))))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: _tick(x)))
    ax.set_xlabel("duration")
    ax.set_ylabel("jobs")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title("Job durations")


def _outcomes_per_day(ax: Any, report: Report) -> None:
    """Submitted, completed and failed jobs side by side for each day (UTC)."""
    from matplotlib.ticker import MaxNLocator  # heavy: see top

    days = [str(d["day"]) for d in report.days]
    submitted = [d["submitted"] for d in report.days]
    completed = [d["completed"] for d in report.days]
    failed = [d["failed"] for d in report.days]
    x = range(len(days))
    ax.bar([i - 0.27 for i in x], submitted, width=0.27, label="submitted", color="#8c8c8c")
    ax.bar(list(x), completed, width=0.27, label="completed", color="#55a868")
    ax.bar([i + 0.27 for i in x], failed, width=0.27, label="failed", color="#c44e52")
    ax.set_xticks(list(x), days, rotation=30, ha="right")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title("Outcomes per day (UTC)")
    ax.legend()


def _outcomes_per_agent(ax: Any, report: Report) -> None:
    """Each agent's completed, failed and cancelled jobs, stacked."""
    from matplotlib.ticker import MaxNLocator  # heavy: see top

    agents = [str(a["agent"]) for a in report.agents]
    bottom = [0] * len(agents)
    for key, label, colour in (
        ("completed", "completed", "#55a868"),
        ("error", "failed", "#c44e52"),
        ("cancelled", "cancelled", "#8172b2"),
    ):
        values = [a[key] for a in report.agents]
        ax.bar(agents, values, bottom=bottom, label=label, color=colour)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title("Outcomes per agent")
    ax.legend()


CHARTS: dict[str, Callable[[Any, Report], None]] = {
    "durations": _durations,
    "outcomes": _outcomes_per_day,
    "agents": _outcomes_per_agent,
}


def charts(report: Report) -> dict[str, str]:
    """Each chart's name (its id on the page is `chart-<name>`) and its SVG, in page order."""
    import matplotlib  # heavy: see top

    matplotlib.use("Agg")  # pyplot must not look for a display, so this comes first
    from matplotlib import pyplot as plt  # heavy, and only after the backend is chosen

    drawn = {}
    for name, draw in CHARTS.items():
        fig, ax = plt.subplots(figsize=FIGURE_SIZE)
        draw(ax, report)
        drawn[name] = _svg(fig)
        plt.close(fig)
    return drawn
