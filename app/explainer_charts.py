"""The explainer's figures: expected speedup against k, chain against tree, the measured cost curve,
and the head's learning curve."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from specdec_core import expected_speedup, expected_tokens_per_step
from specdec_core.costs import CONTEXT_TOKENS, LONG_CONTEXT_TOKENS, LONGEST_VERIFICATION, CostCurve

from .chart_style import COLORS, legend_on_top, style
from .explainer_point import fit, race_point
from .race import Race


def theory_figure(a: float, c: float, k: int, measured: Race | None, curve: CostCurve | None) -> go.Figure:
    """Expected speedup vs k: the ideal (verification as cheap as one pass) and, where this machine's
    verification cost curve was measured, with it; the last race as a star at its measured point, on the curve of
    the a and c fitted to it (explainer_point.py)."""
    ks = np.arange(0, LONGEST_VERIFICATION)  # k = 0..16: the drafts the measured curve prices

    def line(a: float, c: float, with_curve: bool) -> list[float]:
        return [expected_speedup(a, int(n), c, curve.ratio(int(n) + 1) if with_curve else 1.0) for n in ks]

    fig = go.Figure()
    fig.add_scatter(
        x=ks,
        y=line(a, c, False),
        mode="lines+markers",
        name=f"ideal: a={a:.2f}, c={c:.2f}, T(k+1) = T(1)",
        line_color=COLORS["bonus"],
    )
    if curve is not None:
        fig.add_scatter(
            x=ks,
            y=line(a, c, True),
            mode="lines+markers",
            name="with this machine's T(k+1)/T(1)",
            line_color=COLORS["accepted"],
        )
    mine = expected_speedup(a, k, c, curve.ratio(k + 1) if curve else 1.0)
    fig.add_scatter(
        x=[k],
        y=[mine],
        mode="markers",
        marker=dict(size=14, symbol="diamond", color=COLORS["accepted"]),
        name=f"your k={k}",
    )
    point = race_point(measured) if measured is not None else None
    if point is not None:
        fitted = fit(point, curve)
        fig.add_scatter(
            x=ks,
            y=line(fitted.a, fitted.c, curve is not None),
            mode="lines",
            line_dash="dash",
            line_color=COLORS["correction"],
            name=f"last race's curve: a={fitted.a:.2f}, c={fitted.c:.3f}" + (", measured T" if curve else ""),
        )
        fig.add_scatter(
            x=[fitted.k],
            y=[point.speedup],
            mode="markers",
            marker=dict(size=16, symbol="star", color=COLORS["rejected"]),
            name=f"last race: {point.speedup:.2f}×, {point.tokens_per_pass:.2f} tokens a pass, depth {point.depth:.1f}",
        )
    fig.add_hline(y=1.0, line_dash="dot", line_color=COLORS["plain"])
    fig.update_xaxes(title_text="draft length k (the star: the race's mean draft depth)")
    fig.update_yaxes(title_text="expected speedup", rangemode="tozero")
    legend_on_top(style(fig, height=440))
    return fig.update_layout(margin=dict(t=100))  # three rows of legend under the chart's label


def chain_vs_tree_figure(a: float, a_width: float, width: int, c: float, curve: CostCurve | None) -> go.Figure:
    """Expected tokens per pass and speedup against depth: a chain accepts a level when the draft's
    first guess is right (a); a tree of `width` guesses per level when any of them is (a_width, never below a:
    drawn at a, and the legend says so, when set below), at the price of width x depth nodes in the verification pass,
    costed with this machine's curve."""
    raised = " (set below a, which it cannot be: drawn at a)" if a_width < a else ""
    a_width = max(a_width, a)
    depths = np.arange(1, 9)
    chain_tokens = [expected_tokens_per_step(a, int(d)) for d in depths]
    tree_tokens = [expected_tokens_per_step(a_width, int(d)) for d in depths]

    def ratio(nodes: int) -> float:
        return curve.ratio(nodes + 1) if curve else 1.0

    chain_speed = [t / (ratio(int(d)) + d * c) for t, d in zip(chain_tokens, depths)]
    tree_speed = [
        t / (ratio(int(width * d)) + d * c * 1.3) for t, d in zip(tree_tokens, depths)
    ]  # a wider head pass: ~1.3x
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.12)
    for name, tokens, speed, color in (
        (f"chain, a={a:.2f}", chain_tokens, chain_speed, COLORS["spec"]),
        (f"tree, {width} per level, best of them {a_width:.2f}{raised}", tree_tokens, tree_speed, COLORS["accepted"]),
    ):
        fig.add_scatter(x=depths, y=tokens, mode="lines+markers", name=name, line_color=color, row=1, col=1)
        fig.add_scatter(
            x=depths, y=speed, mode="lines+markers", name=name, line_color=color, showlegend=False, row=1, col=2
        )
    fig.add_hline(y=1.0, line_dash="dot", line_color=COLORS["plain"], row=1, col=2)
    fig.update_xaxes(title_text="draft depth k", dtick=1)
    fig.update_yaxes(title_text="tokens per target pass", row=1, col=1)
    fig.update_yaxes(title_text="expected speedup", row=1, col=2)
    legend_on_top(style(fig, height=360))
    return fig.update_layout(margin=dict(l=64))  # room for the left axis's title


def cost_curve_figure(curve: CostCurve) -> go.Figure:
    """T(n)/T(1): what one target pass over n tokens costs against a single-token pass, measured here
    behind a short context and (where measured) a long one, where attention makes wide passes dearer."""
    widths = list(range(1, len(curve.seconds) + 1))
    fig = go.Figure()
    fig.add_scatter(
        x=widths,
        y=curve.ratios,
        mode="lines+markers",
        name=f"measured here, {CONTEXT_TOKENS} tokens cached",
        line_color=COLORS["spec"],
    )
    if curve.long_seconds is not None:
        fig.add_scatter(
            x=widths,
            y=curve.at(LONG_CONTEXT_TOKENS).ratios,
            mode="lines+markers",
            name=f"measured here, {LONG_CONTEXT_TOKENS:,} tokens cached",
            line_color=COLORS["custom"],
        )
    fig.add_scatter(
        x=widths,
        y=[1.0] * len(widths),
        mode="lines",
        line_dash="dot",
        line_color=COLORS["plain"],
        name="ideal: as cheap as one token",
    )
    fig.update_xaxes(title_text="tokens in one target pass (k + 1)", dtick=2)
    fig.update_yaxes(title_text="T(n) / T(1)", rangemode="tozero")
    return legend_on_top(style(fig, height=340))


def learning_curve_figure(curve: list[dict], recipe: Sequence[dict] = ()) -> go.Figure:
    """Held-out top-1 agreement of each draft position against response tokens seen in training; a dotted line
    where a run (from the recipe) trained and held out on another corpus, since the points after it are measured
    on other conversations."""
    fig = go.Figure()
    tokens = [point["train_tokens"] for point in curve]
    depth = len(curve[0]["heldout_top1"]) if curve else 0
    shades = [COLORS["accepted"], COLORS["bonus"], COLORS["creative"], COLORS["correction"]]
    for position in range(depth):
        fig.add_scatter(
            x=tokens,
            y=[point["heldout_top1"][position] for point in curve],
            mode="lines+markers",
            name=f"draft position {position + 1}",
            line_color=shades[position % len(shades)],
        )
    for epoch, corpus in _corpus_changes(recipe):
        at = next((point["train_tokens"] for point in curve if abs(point["epoch"] - epoch) < 1e-3), None)
        if at is not None:
            fig.add_vline(
                x=at,
                line_dash="dot",
                line_color=COLORS["plain"],
                annotation_position="bottom right",
                annotation_text=f"then {corpus}, held out on its own conversations",
            )
    fig.update_xaxes(title_text="response tokens seen in training (epochs included)")
    fig.update_yaxes(title_text="held-out top-1 agreement", range=[0, 1])
    return legend_on_top(style(fig, height=380))


def _corpus_changes(recipe: Sequence[dict]) -> list[tuple[float, str]]:
    """(epochs done before the run, its corpus) for each run that reads another corpus than the run before it."""
    changes, done = [], 0.0
    for before, run in zip([None, *recipe], recipe):
        if before is not None and run.get("corpus") != before.get("corpus"):
            changes.append((done, run.get("corpus") or "the template data"))
        done += run["epochs"]
    return changes
