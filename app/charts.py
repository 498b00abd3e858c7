"""Plotly figures for the race, the theory, the workload check and the k sweep.

template="none" keeps each streamed figure small (Gradio resends a whole figure per update);
the few styles it drops are set by hand in _style.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from specdec_core import SpecStep, expected_speedup, expected_tokens_per_step
from specdec_core.costs import CONTEXT_TOKENS, LONG_CONTEXT_TOKENS, LONGEST_VERIFICATION, CostCurve
from specdec_core.tree import depths

from .race import Race
from .views import AFTER_END, draft_q

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


def _style(fig: go.Figure, height: int) -> go.Figure:
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


def race_figure(race: Race) -> go.Figure:
    fig = make_subplots(
        rows=2,
        cols=2,
        subplot_titles=(
            "Per step: accepted (bars), drafted (line: chain or tree size)",
            "Accepted depth per step (blue: the whole draft)",
            "Tokens / s, each on its own clock",
            "Running speedup (tokens ahead at equal time)",
        ),
        vertical_spacing=0.2,
        horizontal_spacing=0.1,
    )
    steps = race.spec_steps
    if steps:
        index = list(range(1, len(steps) + 1))
        fig.add_bar(
            x=index,
            y=[s.accepted_count for s in steps],
            marker_color=COLORS["accepted"],
            opacity=0.6,
            name="accepted",
            row=1,
            col=1,
            showlegend=False,
        )
        fig.add_scatter(
            x=index,
            y=[s.drafted_count for s in steps],
            mode="lines",
            line_color=COLORS["rejected"],
            name="drafted",
            row=1,
            col=1,
            showlegend=False,
        )
        deepest = max(max(depths(s.parents)) for s in steps)
        counts = np.bincount([s.accepted_count for s in steps], minlength=deepest + 1)
        colors = [COLORS["bonus"] if n == deepest else COLORS["accepted"] for n in range(deepest + 1)]
        fig.add_bar(x=list(range(deepest + 1)), y=counts, marker_color=colors, row=1, col=2, showlegend=False)
    for side, pane, label in (("plain", race.plain, "target only"), ("spec", race.spec, "speculative")):
        if pane.timeline:
            clock, tokens = zip(*pane.timeline)
            rate = np.array(tokens) / np.maximum(np.array(clock), 1e-9)
            fig.add_scatter(x=clock, y=rate, mode="lines", name=label, line_color=COLORS[side], row=2, col=1)
    if race.plain.timeline and race.spec.timeline:
        plain_clock, plain_tokens = zip(*race.plain.timeline)
        spec_clock, spec_tokens = (np.array(v) for v in zip(*race.spec.timeline))
        reached = spec_clock <= plain_clock[-1]
        ahead = spec_tokens[reached] / np.maximum(np.interp(spec_clock[reached], plain_clock, plain_tokens), 1e-9)
        fig.add_scatter(
            x=spec_clock[reached], y=ahead, mode="lines", line_color=COLORS["spec"], row=2, col=2, showlegend=False
        )
        fig.add_hline(y=1.0, line_dash="dot", line_color=COLORS["plain"], row=2, col=2)
    fig.update_yaxes(rangemode="tozero", row=1, col=1)
    fig.update_xaxes(title_text="step", row=1, col=1)
    fig.update_xaxes(title_text="accepted drafts (depth reached)", row=1, col=2)
    fig.update_xaxes(title_text="own clock (s)", row=2, col=1)
    fig.update_xaxes(title_text="speculative clock (s)", row=2, col=2)
    fig.update_annotations(font_size=13)
    return _style(fig, height=520)


def theory_figure(a: float, c: float, k: int, measured: Race | None, curve: CostCurve | None) -> go.Figure:
    """Expected speedup vs k: the ideal (verification as cheap as one pass) and, where this machine's
    verification cost curve was measured, with it; the last race on both."""
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
    if measured is not None and measured.acceptance_rate is not None and measured.c is not None and measured.speedup:
        ma, mc = measured.acceptance_rate, measured.c
        fig.add_scatter(
            x=ks,
            y=line(ma, mc, curve is not None),
            mode="lines",
            line_dash="dash",
            line_color=COLORS["correction"],
            name=f"at last race's a={ma:.2f}, c={mc:.2f}" + (", measured curve" if curve else ""),
        )
        fig.add_scatter(
            x=[measured.k],
            y=[measured.speedup],
            mode="markers",
            marker=dict(size=16, symbol="star", color=COLORS["rejected"]),
            name=f"measured: {measured.speedup:.2f}× at k={measured.k}",
        )
    fig.add_hline(y=1.0, line_dash="dot", line_color=COLORS["plain"])
    fig.update_xaxes(title_text="draft length k")
    fig.update_yaxes(title_text="expected speedup", rangemode="tozero")
    return _legend_on_top(_style(fig, height=420))


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
    return _legend_on_top(_style(fig, height=340))


def _legend_on_top(fig: go.Figure) -> go.Figure:
    """Above the plot, where it cannot cover the x-axis title (the default sits below the axis)."""
    fig.update_layout(legend=dict(orientation="h", x=0, y=1.02, yanchor="bottom"), margin=dict(t=64))
    return fig


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
    return _legend_on_top(_style(fig, height=380))


def _corpus_changes(recipe: Sequence[dict]) -> list[tuple[float, str]]:
    """(epochs done before the run, its corpus) for each run that reads another corpus than the run before it."""
    changes, done = [], 0.0
    for before, run in zip([None, *recipe], recipe):
        if before is not None and run.get("corpus") != before.get("corpus"):
            changes.append((done, run.get("corpus") or "the template data"))
        done += run["epochs"]
    return changes


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
    return _style(fig, height=380)


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
    return _style(fig, height=380)


def tree_figure(step: SpecStep | None, text, index: int = 0, total: int = 0) -> go.Figure:
    """One step's draft as a tree (a chain is a tree with one branch): the root is the last context
    token; the accepted path green, refused nodes red, nodes below a refusal pale; then the target's
    correction or bonus token. Hover a node for q, p and min(1, p/q)."""
    fig = go.Figure()
    if step is None or not step.drafted_count:
        fig.add_annotation(text="No draft yet: race, then step through the drafted trees here.", showarrow=False)
        fig.update_xaxes(visible=False)
        fig.update_yaxes(visible=False)
        return _style(fig, height=240)
    x, y = _tree_layout(step.parents)
    on_path = {-1, *step.path}
    last = step.path[-1] if step.path else -1
    # the target's own token hangs below the last accepted node
    x[len(step.parents)] = x[last] + 1
    y[len(step.parents)] = y[last] if last >= 0 else 0.0
    for node, parent in enumerate(step.parents):
        accepted = node in step.path
        fig.add_scatter(
            x=[x[parent], x[node]],
            y=[y[parent], y[node]],
            mode="lines",
            hoverinfo="skip",
            showlegend=False,
            line=dict(color=COLORS["accepted"] if accepted else "#c9ccd1", width=3 if accepted else 1),
        )
    if step.next_emitted:
        fig.add_scatter(
            x=[x[last], x[len(step.parents)]],
            y=[y[last], y[len(step.parents)]],
            mode="lines",
            hoverinfo="skip",
            showlegend=False,
            line=dict(color=COLORS[step.next_outcome], width=3, dash="dot"),
        )
    groups = {
        "accepted": list(step.emitted_path),
        AFTER_END: list(step.accepted_after_end),
        "rejected": [n for n in range(step.drafted_count) if n not in step.path and step.parents[n] in on_path],
        "unverified": [n for n in range(step.drafted_count) if n not in step.path and step.parents[n] not in on_path],
    }
    colors = {
        "accepted": COLORS["accepted"],
        AFTER_END: "#b5dfc4",
        "rejected": COLORS["rejected"],
        "unverified": "#f0b4b4",
    }
    for name, nodes in groups.items():
        if nodes:
            fig.add_scatter(
                x=[x[n] for n in nodes],
                y=[y[n] for n in nodes],
                mode="markers+text",
                name=name,
                text=[_label(text(step.draft_tokens[n])) for n in nodes],
                textposition="top center",
                marker=dict(size=16, color=colors[name], line=dict(width=1, color="#555")),
                hovertext=[_node_hover(step, n, text) for n in nodes],
                hoverinfo="text",
            )
    fig.add_scatter(
        x=[x[-1]],
        y=[y[-1]],
        mode="markers",
        name="root (last context token)",
        hoverinfo="skip",
        marker=dict(size=12, color=COLORS["plain"], symbol="square"),
    )
    if step.next_emitted:
        fig.add_scatter(
            x=[x[len(step.parents)]],
            y=[y[len(step.parents)]],
            mode="markers+text",
            name=step.next_outcome,
            text=[_label(text(step.next_token))],
            textposition="top center",
            marker=dict(size=18, color=COLORS[step.next_outcome], symbol="star"),
            hovertext=[f"{step.next_outcome} from the target · p={step.next_token_prob:.3f}"],
            hoverinfo="text",
        )
    shape = "chain" if step.is_chain else "tree"
    ended = "" if step.next_emitted else f" (the answer ended at the end token, depth {len(step.emitted_path)})"
    fig.update_layout(
        title=dict(
            text=f"Step {index + 1} of {total}: a {shape} of {step.drafted_count} drafted tokens, "
            f"{step.accepted_count} accepted{ended}",
            font_size=14,
        )
    )
    fig.update_xaxes(title_text="depth (tokens after the context)", dtick=1, zeroline=False)
    fig.update_yaxes(visible=False)
    return _legend_on_top(_style(fig, height=360))


def _tree_layout(parents: tuple[int, ...]) -> tuple[dict[int, float], dict[int, float]]:
    """x = depth; y: leaves one apart in depth-first order, a parent at the middle of its children."""
    kids: dict[int, list[int]] = {-1: []}
    for node, parent in enumerate(parents):
        kids.setdefault(node, [])
        kids[parent].append(node)
    x: dict[int, float] = {-1: 0.0}
    y: dict[int, float] = {}
    next_leaf = [0.0]

    def place(node: int, depth: int) -> float:
        x[node] = float(depth)
        if not kids[node]:
            y[node] = next_leaf[0]
            next_leaf[0] -= 1.0
        else:
            y[node] = sum(place(child, depth + 1) for child in kids[node]) / len(kids[node])
        return y[node]

    place(-1, 0)
    return x, y


def _label(token_text: str) -> str:
    shown = token_text.replace("\n", "⏎") or "∅"
    return shown if len(shown) <= 10 else shown[:9] + "…"


def _node_hover(step: SpecStep, node: int, text) -> str:
    q = draft_q(step, node)
    q_text = "n/a (n-gram guess)" if q is None else f"{q:.3f}"
    return (
        f"{text(step.draft_tokens[node])!r} · draft q={q_text} · target p={step.target_probs[node]:.3f} · "
        f"min(1, p/q)={step.accept_probs[node]:.3f}"
    )


def chain_vs_tree_figure(a: float, a_width: float, width: int, c: float, curve: CostCurve | None) -> go.Figure:
    """Expected tokens per pass and speedup against depth: a chain accepts a level when the draft's
    first guess is right (a); a tree of `width` guesses per level when any of them is (a_width), at
    the price of width x depth nodes in the verification pass, costed with this machine's curve."""
    depths = np.arange(1, 9)
    chain_tokens = [expected_tokens_per_step(a, int(d)) for d in depths]
    tree_tokens = [expected_tokens_per_step(a_width, int(d)) for d in depths]

    def ratio(nodes: int) -> float:
        return curve.ratio(nodes + 1) if curve else 1.0

    chain_speed = [t / (ratio(int(d)) + d * c) for t, d in zip(chain_tokens, depths)]
    tree_speed = [
        t / (ratio(int(width * d)) + d * c * 1.3) for t, d in zip(tree_tokens, depths)
    ]  # a wider head pass: ~1.3x
    fig = make_subplots(rows=1, cols=2, subplot_titles=("Expected tokens per target pass", "Expected speedup"))
    for name, tokens, speed, color in (
        ("chain", chain_tokens, chain_speed, COLORS["spec"]),
        (f"tree, {width} per level", tree_tokens, tree_speed, COLORS["accepted"]),
    ):
        fig.add_scatter(x=depths, y=tokens, mode="lines+markers", name=name, line_color=color, row=1, col=1)
        fig.add_scatter(
            x=depths, y=speed, mode="lines+markers", name=name, line_color=color, showlegend=False, row=1, col=2
        )
    fig.add_hline(y=1.0, line_dash="dot", line_color=COLORS["plain"], row=1, col=2)
    fig.update_xaxes(title_text="draft depth k", dtick=1)
    return _legend_on_top(_style(fig, height=360))
