"""The workload check's figures: speedup and acceptance per prompt, and the k sweep."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .chart_style import COLORS, style


def workload_figure(rows: list[dict]) -> go.Figure:
    fig = make_subplots(rows=1, cols=2, subplot_titles=("Speedup per prompt", "Acceptance rate per prompt"))
    for workload in dict.fromkeys(r["workload"] for r in rows):
        mine = [r for r in rows if r["workload"] == workload]
        names = [r["prompt"] for r in mine]
        color = COLORS.get(workload, COLORS["custom"])
        fig.add_bar(x=names, y=[r["speedup"] for r in mine], name=workload, marker_color=color, row=1, col=1)
        fig.add_bar(
            x=names, y=[r["acceptance_rate"] or 0 for r in mine], marker_color=color, showlegend=False, row=1, col=2
        )
    fig.add_hline(y=1.0, line_dash="dot", line_color=COLORS["plain"], row=1, col=1)
    fig.update_yaxes(range=[0, 1.05], row=1, col=2)
    return style(fig, height=380)


def sweep_figure(rows: list[dict]) -> go.Figure:
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    if rows:
        ks = [r["k"] for r in rows]
        fig.add_scatter(
            x=ks, y=[r["speedup"] for r in rows], mode="lines+markers", name="speedup", line_color=COLORS["spec"]
        )
        fig.add_scatter(
            x=ks,
            y=[r["acceptance_rate"] or 0 for r in rows],
            mode="lines+markers",
            name="acceptance rate",
            line_color=COLORS["accepted"],
            secondary_y=True,
        )
        best = max(rows, key=lambda r: r["speedup"])
        fig.add_scatter(
            x=[best["k"]],
            y=[best["speedup"]],
            mode="markers+text",
            text=[f"best k={best['k']}"],
            textposition="top center",
            marker=dict(size=16, symbol="star", color=COLORS["rejected"]),
            name="best k",
        )
    fig.add_hline(y=1.0, line_dash="dot", line_color=COLORS["plain"])
    fig.update_xaxes(title_text="draft length k", dtick=1)
    fig.update_yaxes(title_text="speedup", rangemode="tozero", secondary_y=False)
    fig.update_yaxes(title_text="acceptance rate", range=[0, 1.05], secondary_y=True)
    return style(fig, height=380)
