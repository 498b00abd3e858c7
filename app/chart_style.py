"""The look shared by every figure: the outcome colours and a small template.

template="none" keeps each streamed figure small (Gradio resends a whole figure per update);
the few styles it drops are set by hand in style().
"""

from __future__ import annotations

import plotly.graph_objects as go

COLORS = {
    "accepted": "#2e9d57",
    "rejected": "#d64545",
    "correction": "#e08a1e",
    "bonus": "#3a6fd8",
    "target": "#7a7f87",
    "plain": "#7a7f87",
    "spec": "#3a6fd8",
    "structured": "#2e9d57",
    "creative": "#b04fc0",
    "custom": "#e08a1e",
}


def style(fig: go.Figure, height: int) -> go.Figure:
    fig.update_layout(
        template="none",
        height=height,
        margin=dict(l=48, r=16, t=48, b=40),
        font=dict(size=12),
        legend=dict(orientation="h", y=-0.12),
        uirevision="keep",
        paper_bgcolor="rgba(0,0,0,0)",
        plot_bgcolor="rgba(0,0,0,0)",
    )
    fig.update_xaxes(gridcolor="#e3e5e8", zeroline=False)
    fig.update_yaxes(gridcolor="#e3e5e8", zeroline=False)
    return fig


def legend_on_top(fig: go.Figure, above_titles: bool = False) -> go.Figure:
    """Above the plot, where it cannot cover the x-axis title (the default sits below the axis); above_titles:
    higher still, clear of subplot titles."""
    y, top = (1.12, 96) if above_titles else (1.02, 64)
    fig.update_layout(legend=dict(orientation="h", x=0, y=y, yanchor="bottom"), margin=dict(t=top))
    return fig
