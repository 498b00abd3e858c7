"""The served-model check's figures: acceptance and tokens per second per prompt, acceptance by draft position."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .chart_style import COLORS, legend_on_top, style

TITLES = ("Acceptance rate per prompt", "Tokens/s per prompt", "Acceptance by draft position")


def server_figure(rows: list[dict]) -> go.Figure:
    fig = make_subplots(rows=1, cols=3, subplot_titles=TITLES)
    for workload in dict.fromkeys(r["workload"] for r in rows):
        mine = [r for r in rows if r["workload"] == workload]
        names = [r["prompt"] for r in mine]
        color = COLORS.get(workload, COLORS["custom"])
        fig.add_bar(
            x=names, y=[r["acceptance_rate"] or 0 for r in mine], name=workload, marker_color=color, col=1, row=1
        )
        fig.add_bar(x=names, y=[r["tok_s"] for r in mine], marker_color=color, showlegend=False, col=2, row=1)
        if any(r["baseline_tok_s"] is not None for r in mine):
            fig.add_bar(
                x=names,
                y=[r["baseline_tok_s"] or 0 for r in mine],
                name=f"{workload}: baseline server",
                marker_color=COLORS["plain"],
                col=2,
                row=1,
            )
    _by_position(fig, rows)
    fig.update_yaxes(range=[0, 1.05], row=1, col=1)
    fig.update_yaxes(range=[0, 1.05], row=1, col=3)
    fig.update_xaxes(title_text="draft position", dtick=1, row=1, col=3)
    return legend_on_top(style(fig, height=420), above_titles=True)


def _by_position(fig: go.Figure, rows: list[dict]) -> None:
    """Acceptance by position over all prompts (each prompt weighted by its drafts): the server's, and this
    engine's where the side by side ran."""
    for key, drafts, name, color in (
        ("acceptance_by_position", "drafts", "server", COLORS["spec"]),
        ("ours_acceptance_by_position", "ours_drafts", "this engine's n-gram", COLORS["accepted"]),
    ):
        counted = [(r[key], r[drafts]) for r in rows if r.get(key) and r.get(drafts)]
        if counted:
            longest = max(len(rates) for rates, _ in counted)
            total = sum(n for _, n in counted)
            pooled = [sum(rates[i] * n for rates, n in counted if i < len(rates)) / total for i in range(longest)]
            positions = list(range(1, longest + 1))
            fig.add_scatter(x=positions, y=pooled, mode="lines+markers", name=name, line_color=color, col=3, row=1)
