"""The acceptance rule as a picture, for one step of a race: at the node where the target's walk stopped, bars of p
and q over the top tokens, their overlap min(p, q) (what a draw from q keeps), and what a refusal leaves of p,
max(0, p - q) renormalised, from which the target draws its own token. For a tree the siblings are tried in
order, each against what the ones before it left.
"""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from specdec_core import SpecStep
from specdec_core.events import ARGMAX_MATCH, Judgement, Trial

from .chart_style import COLORS, style
from .views import RULE_VALUES

MOST_TRIALS = 3  # siblings drawn side by side; a wider node's later tries are summarised in the title
OVERLAP = "#8fd19e"


def rule_figure(step: SpecStep | None, text) -> go.Figure:
    """The rule at the step's deepest judged node: each child tried in order, then what the target drew its own token
    from (the residual after a refusal, p itself for a bonus). layout.meta carries the masses each panel shows."""
    fig = go.Figure()
    if step is None or not step.judgements:
        fig.add_annotation(text="Race, then pick a step: the rule's picture for it appears here.", showarrow=False)
        fig.update_xaxes(visible=False)
        fig.update_yaxes(visible=False)
        return style(fig, height=220)
    # The deepest node whose children were tried; after a path that ended at a leaf, the bonus drawn below it.
    judgement = next((j for j in reversed(step.judgements) if j.trials), step.judgements[-1])
    last = step.judgements[-1]
    trials = judgement.trials[:MOST_TRIALS]
    labels, last_labels = _labels(judgement.shown, text), _labels(last.shown, text)
    titles = [
        _trial_title(step, trial, i, labels[judgement.shown.index(step.draft_tokens[trial.node])])
        for i, trial in enumerate(trials)
    ]
    titles.append(_drawn_title(step, last, last_labels))
    fig = make_subplots(rows=1, cols=len(trials) + 1, subplot_titles=titles, horizontal_spacing=0.06)
    for col, trial in enumerate(trials, start=1):
        _trial_bars(fig, trial, labels, col, greedy=step.rule == ARGMAX_MATCH)
    _drawn_bars(fig, last, last_labels, len(trials) + 1)
    where = "the root" if judgement.node < 0 else f"accepted node {judgement.node + 1}"
    fig.update_layout(
        title=dict(
            text=f"The rule at {where} ({RULE_VALUES[step.rule]}): children tried in draft order",
            font_size=14,
            x=0.01,
            xanchor="left",
        ),
        meta={
            "accepted_mass": [t.accepted_mass for t in trials],
            "residual_mass": [t.residual_mass for t in trials],
            "drawn": last.drawn,
        },
    )
    fig.update_annotations(font_size=12)
    fig.update_yaxes(range=[0, 1.05], title_text="probability", col=1)
    style(fig, height=420)  # the legend below: above, it would meet the title and the panels' titles
    return fig.update_layout(legend=dict(orientation="h", x=0, y=-0.1, yanchor="top"), margin=dict(t=96, b=72))


def _labels(tokens: tuple[int, ...], text) -> list[str]:
    """Axis labels, made unique (two ids may decode alike)."""
    seen: dict[str, int] = {}
    labels = []
    for token in tokens:
        shown = repr(text(token))[1:-1][:10] or "∅"
        seen[shown] = seen.get(shown, 0) + 1
        labels.append(shown if seen[shown] == 1 else f"{shown}#{token}")
    return labels


def _trial_title(step: SpecStep, trial: Trial, index: int, label: str) -> str:
    verdict = "kept" if trial.accepted else "refused"
    if step.rule == ARGMAX_MATCH:
        return f"try {index + 1}: '{label}' {verdict} (argmax match)"
    return (
        f"try {index + 1}: '{label}' kept w.p. {trial.accept_prob:.2f}: {verdict}<br>"
        f"Σ min(p,q) {trial.accepted_mass:.2f} + Σ max(0,p−q) {trial.residual_mass:.2f}"
    )


def _drawn_title(step: SpecStep, judgement: Judgement, labels: list[str]) -> str:
    drawn = labels[judgement.shown.index(judgement.drawn)]
    if step.rule == ARGMAX_MATCH:
        return f"the target's own: '{drawn}' (its argmax)"
    source = "norm(max(0, p − q))" if judgement.trials else "p: the bonus after the path's leaf"
    return f"the target draws '{drawn}'<br>from {source}"


def _trial_bars(fig: go.Figure, trial: Trial, labels: list[str], col: int, greedy: bool) -> None:
    first = col == 1
    fig.add_bar(
        x=labels,
        y=trial.p,
        name="target p",
        marker_color=COLORS["plain"],
        opacity=0.5,
        showlegend=first,
        legendgroup="p",
        row=1,
        col=col,
    )
    fig.add_bar(
        x=labels,
        y=trial.q,
        name="draft q (1 on a chosen guess)",
        marker_color=COLORS["bonus"],
        opacity=0.45,
        showlegend=first,
        legendgroup="q",
        row=1,
        col=col,
    )
    if not greedy:
        overlap = [min(p, q) for p, q in zip(trial.p, trial.q, strict=True)]
        fig.add_bar(
            x=labels,
            y=overlap,
            name="min(p, q): what a draw from q keeps",
            marker_color=OVERLAP,
            showlegend=first,
            legendgroup="overlap",
            row=1,
            col=col,
        )
    fig.update_layout(barmode="overlay")


def _drawn_bars(fig: go.Figure, judgement: Judgement, labels: list[str], col: int) -> None:
    colors = [COLORS["correction"] if token == judgement.drawn else "#f3c78f" for token in judgement.shown]
    fig.add_bar(x=labels, y=judgement.left, name="what is left of p, renormalised", marker_color=colors, row=1, col=col)
