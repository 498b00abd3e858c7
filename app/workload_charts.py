"""The workload check's figures: speedup (median, min–max bars) and acceptance per prompt, and the k sweep."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .chart_style import COLORS, style
from .repeats import Best

COPY_PATTERN = "/"  # hatches the bar of an output that mostly copies its prompt


def workload_figure(rows: list[dict]) -> go.Figure:
    fig = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=("Speedup per prompt (median, min–max; hatched: copies the prompt)", "Acceptance per prompt"),
    )
    for workload in dict.fromkeys(r["workload"] for r in rows):
        mine = [r for r in rows if r["workload"] == workload]
        names = [r["prompt"] for r in mine]
        color = COLORS.get(workload, COLORS["custom"])
        fig.add_bar(
            x=names,
            y=[r["speedup"] for r in mine],
            error_y=_spread_bars(mine),
            marker=dict(color=color, pattern_shape=[COPY_PATTERN if r["copies_prompt"] else "" for r in mine]),
            name=workload,
            row=1,
            col=1,
        )
        fig.add_bar(
            x=names, y=[r["acceptance_rate"] or 0 for r in mine], marker_color=color, showlegend=False, row=1, col=2
        )
    fig.add_hline(y=1.0, line_dash="dot", line_color=COLORS["plain"], row=1, col=1)
    fig.update_yaxes(range=[0, 1.05], row=1, col=2)
    return style(fig, height=380)


def sweep_figure(rows: list[dict], best: Best | None) -> go.Figure:
    """Median speedup per k with its min–max, acceptance, the best k and the ks within noise of it."""
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    if rows:
        ks = [r["k"] for r in rows]
        fig.add_scatter(
            x=ks,
            y=[r["speedup"] for r in rows],
            error_y=_spread_bars(rows),
            mode="lines+markers",
            name="speedup",
            line_color=COLORS["spec"],
        )
        fig.add_scatter(
            x=ks,
            y=[r["acceptance_rate"] or 0 for r in rows],
            mode="lines+markers",
            name="acceptance rate",
            line_color=COLORS["accepted"],
            secondary_y=True,
        )
    if best is not None:
        _mark_best(fig, best)
    fig.add_hline(y=1.0, line_dash="dot", line_color=COLORS["plain"])
    fig.update_xaxes(title_text="draft length k", dtick=1)
    fig.update_yaxes(title_text="speedup", rangemode="tozero", secondary_y=False)
    fig.update_yaxes(title_text="acceptance rate", range=[0, 1.05], secondary_y=True)
    return style(fig, height=380)


def _mark_best(fig: go.Figure, best: Best) -> None:
    fig.add_scatter(
        x=[best.setting],
        y=[best.spread.median],
        mode="markers+text",
        text=[f"best k={best.setting}" if best.certain else f"k={best.setting}: best median"],
        textposition="top center",
        marker=dict(size=16, symbol="star", color=COLORS["rejected"]),
        name="best k",
    )
    if best.rivals:
        fig.add_scatter(
            x=[k for k, _ in best.rivals],
            y=[spread.median for _, spread in best.rivals],
            mode="markers",
            marker=dict(size=14, symbol="star-open", color=COLORS["rejected"]),
            name="within noise of the best",
        )


def _spread_bars(rows: list[dict]) -> dict:
    """Error bars from each median down to its min and up to its max."""
    return dict(
        type="data",
        symmetric=False,
        array=[r["speedup_max"] - r["speedup"] for r in rows],
        arrayminus=[r["speedup"] - r["speedup_min"] for r in rows],
        color=COLORS["plain"],
    )
