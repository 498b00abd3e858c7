"""The race's figures: the live charts under the panes, and one step's draft tree."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from specdec_core import SpecStep
from specdec_core.events import DRAFT_MODEL, HEAD, LOOKUP, LOOKUP_AND_HEAD
from specdec_core.tree import depths

from .chart_style import COLORS, legend_on_top, style
from .race import Race
from .views import AFTER_END, RULE_VALUES, SOURCE_NAMES, draft_makeup, node_probs

SOURCE_SYMBOLS = {LOOKUP: "diamond", HEAD: "circle", DRAFT_MODEL: "circle", LOOKUP_AND_HEAD: "hexagon"}
SOURCE_MARKS = {LOOKUP: "◆", HEAD: "●", DRAFT_MODEL: "●", LOOKUP_AND_HEAD: "⬢"}
STAR_OFFSET = 0.5  # rows above the last accepted node's refused children
ROW_PIXELS = 46  # height per leaf: labels sit above their node and must clear the row above
TREE_MAX_HEIGHT = 900


def race_figure(race: Race) -> go.Figure:
    fig = make_subplots(
        rows=2,
        cols=2,
        subplot_titles=(
            "Per step with a draft: accepted (bars), drafted nodes (line)",
            "Steps by accepted depth",
            "Tokens / s so far, each on its own clock",
            "Speedup so far (speculative ÷ target-only tokens / s)",
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
        fig.add_bar(
            x=list(range(deepest + 1)), y=counts, marker_color=COLORS["accepted"], row=1, col=2, showlegend=False
        )
    for side, pane, label in (("plain", race.plain, "target only"), ("spec", race.spec, "speculative")):
        if pane.timeline:
            clock, tokens = zip(*pane.timeline)
            rate = np.array(tokens) / np.maximum(np.array(clock), 1e-9)
            fig.add_scatter(x=clock, y=rate, mode="lines", name=label, line_color=COLORS[side], row=2, col=1)
    if race.plain.timeline and race.spec.timeline:
        clock, ratio = speedup_so_far(race)
        fig.add_scatter(x=clock, y=ratio, mode="lines", line_color=COLORS["spec"], row=2, col=2, showlegend=False)
        fig.add_hline(y=1.0, line_dash="dot", line_color=COLORS["plain"], row=2, col=2)
    fig.update_yaxes(rangemode="tozero", row=1, col=1)
    fig.update_xaxes(title_text="step", row=1, col=1)
    fig.update_xaxes(title_text="accepted drafts (depth reached)", row=1, col=2)
    fig.update_xaxes(title_text="own clock (s)", row=2, col=1)
    fig.update_xaxes(title_text="speculative clock (s)", row=2, col=2)
    fig.update_annotations(font_size=13)
    return style(fig, height=520)


def speedup_so_far(race: Race) -> tuple[list[float], list[float]]:
    """At each moment of either clock, the speculative pane's tokens per second so far over the target-only pane's;
    a pane that has finished keeps its final rate, so the line ends at the summary's speedup."""
    plain_clock, plain_tokens = (np.array(v) for v in zip(*race.plain.timeline))
    spec_clock, spec_tokens = (np.array(v) for v in zip(*race.spec.timeline))
    clock = np.union1d(plain_clock, spec_clock)

    def rate(own_clock: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        at = np.minimum(clock, own_clock[-1])
        return np.interp(at, own_clock, tokens, left=0.0) / np.maximum(at, 1e-9)

    plain_rate = rate(plain_clock, plain_tokens)
    keep = plain_rate > 0
    return clock[keep].tolist(), (rate(spec_clock, spec_tokens)[keep] / plain_rate[keep]).tolist()


def tree_figure(step: SpecStep | None, text, index: int = 0, total: int = 0) -> go.Figure:
    """One step's draft as a tree (a chain is a tree with one branch): the root is the last context
    token; the accepted path green, refused nodes red, nodes below a refusal pale; then the target's
    correction or bonus token. Hover a node for q, p and min(1, p/q)."""
    fig = go.Figure()
    if step is None or not step.drafted_count:
        fig.add_annotation(text="No draft yet: race, then step through the drafted trees here.", showarrow=False)
        fig.update_xaxes(visible=False)
        fig.update_yaxes(visible=False)
        return style(fig, height=240)
    x, y = _tree_layout(step.parents)
    on_path = {-1, *step.path}
    last = step.path[-1] if step.path else -1
    # The target's own token hangs off the last accepted node, half a row above its refused children so the two
    # never overlap.
    x[len(step.parents)] = x[last] + 1
    y[len(step.parents)] = y[last] + STAR_OFFSET
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
                marker=dict(
                    size=16,
                    color=colors[name],
                    symbol=[SOURCE_SYMBOLS[step.sources[n]] for n in nodes],
                    line=dict(width=1, color="#555"),
                ),
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
            text=f"Step {index + 1} of {total} with a draft: a {shape} of {step.drafted_count} tokens<br>"
            f"({draft_makeup(step)}), {step.accepted_count} accepted{ended}",
            font_size=14,
            x=0.01,
            xanchor="left",
        )
    )
    fig.add_annotation(  # under the axis title, in pixels, whatever the figure's height
        text=f"Shapes: {source_key(step)} · rule: {RULE_VALUES[step.rule]}",
        xref="paper",
        yref="paper",
        x=0,
        y=0,
        yanchor="top",
        yshift=-46,
        showarrow=False,
        xanchor="left",
        font=dict(size=12, color=COLORS["plain"]),
    )
    fig.update_xaxes(title_text="depth (tokens after the context)", dtick=1, zeroline=False)
    fig.update_yaxes(visible=False, range=[min(y.values()) - 0.6, max(y.values()) + 0.9])
    leaves = sum(1 for node in range(step.drafted_count) if node not in step.parents)
    legend_on_top(style(fig, height=min(TREE_MAX_HEIGHT, 280 + ROW_PIXELS * leaves)))
    return fig.update_layout(margin=dict(t=104, b=76))  # room for the two-line title and the shapes' key


def source_key(step: SpecStep) -> str:
    """The node shapes a step uses, named."""
    used = dict.fromkeys(step.sources)
    return " · ".join(f"{SOURCE_MARKS[source]} {SOURCE_NAMES[source]}" for source in SOURCE_NAMES if source in used)


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
    return f"{text(step.draft_tokens[node])!r} · {node_probs(step, node)}"
