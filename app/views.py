"""Events to HTML: coloured tokens, legend, summary table, and one step taken apart.

Hand-built HTML because no Gradio component shows per-token colours *and* per-token tooltips
(HighlightedText has no tooltip). Every piece of model or user text goes through html.escape.
"""

from __future__ import annotations

import html
from collections.abc import Iterable

from transformers import PreTrainedTokenizerBase

from specdec_core import ACCEPTED, BONUS, CORRECTION, REJECTED, TARGET, PlainStep, SpecStep, per_position_acceptance
from specdec_core.cpu_kernels import MKL_PACKED, PACKED, STOCK
from specdec_core.events import Step
from specdec_core.tuning import KERNEL_WIDTHS, KERNELS, TargetTuning, kernel_key

from .limits import RUN_SECONDS
from .race import Pane, Race

STOP_REASONS = {
    "eos": "end of turn",
    "max_new_tokens": "max new tokens",
    "context_full": "context window full",
    "time_limit": f"time limit ({RUN_SECONDS:.0f} s per decoder)",
    "cancelled": "cancelled",
}

LEGEND = {
    ACCEPTED: "draft token accepted",
    REJECTED: "draft token rejected (never emitted; ✕n: n refused drafts, hover to list)",
    CORRECTION: "target's correction",
    BONUS: "target's bonus token",
    TARGET: "target token (no draft)",
}
# An accepted draft below an accepted end token: the target agreed, but the answer had ended.
AFTER_END = "accepted after the end token (not emitted)"


class TokenText:
    """Token id -> display text, decoded once per id."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase) -> None:
        self._tokenizer = tokenizer
        self._cache: dict[int, str] = {}

    def __call__(self, token: int) -> str:
        if token not in self._cache:
            self._cache[token] = self._tokenizer.decode([token])
        return self._cache[token]


def _span(text: str, outcome: str, tooltip: str) -> str:
    shown = text if text else "∅"
    return f'<span class="tok tok-{outcome}" title="{html.escape(tooltip)}">{html.escape(shown)}</span>'


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def draft_q(step: SpecStep, node: int) -> float | None:
    """q(x) of a node; None for a model-free guess (an n-gram drafter, or a lookup-only node of the
    hybrid's tree, which carries NaN)."""
    q = step.draft_probs[node] if step.draft_probs is not None else None
    return None if q is None or q != q else q


def _node_probs(step: SpecStep, node: int) -> str:
    q = draft_q(step, node)
    q_text = "n/a (n-gram guess, q = 1)" if q is None else _pct(q)
    return f"draft q={q_text} · target p={_pct(step.target_probs[node])} · accept prob={_pct(step.accept_probs[node])}"


def refused_nodes(step: SpecStep) -> list[tuple[int, str]]:
    """(node, what happened) for every drafted node off the accepted path, in draft order: the target
    judged and refused a node whose parent was accepted (or is the root); the rest it never reached."""
    on_path = {-1, *step.path}
    return [
        (node, "rejected" if step.parents[node] in on_path else "discarded unverified (below a refused guess)")
        for node in range(step.drafted_count)
        if node not in step.path
    ]


def step_spans(step: Step, text: TokenText, inline_rejected: bool = False) -> Iterable[str]:
    """The spans of one step, in the order a reader meets them: the accepted drafts, the refused
    ones (one compact marker whose hover lists them, or inline), then the target's own token."""
    if isinstance(step, PlainStep):
        yield _span(text(step.token), TARGET, f"target p={_pct(step.target_prob)}")
        return
    for node in step.emitted_path:
        yield _span(text(step.draft_tokens[node]), ACCEPTED, f"accepted · {_node_probs(step, node)}")
    refused = refused_nodes(step)
    if refused and inline_rejected:
        for node, what in refused:
            yield _span(text(step.draft_tokens[node]), REJECTED, f"{what} · {_node_probs(step, node)}")
    elif refused:
        listed = "; ".join(f"{text(step.draft_tokens[node])!r} ({what.split(' ')[0]})" for node, what in refused)
        yield (
            f'<span class="tok tok-marker" title="{html.escape(f"{len(refused)} refused drafts: {listed}")}">'
            f"✕{len(refused)}</span>"
        )
    if step.next_emitted:
        outcome = step.next_outcome
        why = {CORRECTION: "target's correction", BONUS: "bonus token after the accepted path ended at a leaf"}.get(
            outcome, "target token (the drafter had nothing to offer)"
        )
        yield _span(text(step.next_token), outcome, f"{why} · target p={_pct(step.next_token_prob)}")


def pane_html(title: str, pane: Pane, text: TokenText, running: bool, inline_rejected: bool = False) -> str:
    spans = "".join(span for step in pane.steps for span in step_spans(step, text, inline_rejected))
    state = "running…" if running else ("done" if pane.summary else "waiting")
    stats = (
        f"{pane.token_count} tokens · {len(pane.steps)} target passes · "
        f"{pane.tokens_per_second:.1f} tok/s on its own clock ({pane.clock:.2f} s) · {state}"
    )
    return (
        f'<div class="pane"><div class="pane-head"><b>{html.escape(title)}</b>'
        f'<span class="pane-stats">{html.escape(stats)}</span></div>'
        f'<div class="tokens">{spans}</div></div>'
    )


def legend_html() -> str:
    items = "".join(f'<span class="tok tok-{k}">{html.escape(v)}</span>' for k, v in LEGEND.items())
    return f'<div class="legend">{items}<span class="hint">hover a token for its probabilities</span></div>'


def summary_html(race: Race) -> str:
    plain, spec = race.plain.summary, race.spec.summary
    if plain is None or spec is None:
        return ""
    saved = plain.target_passes - spec.target_passes
    identical = {
        None: "n/a: sampling keeps the distribution, not the exact tokens",
        True: "✔ identical",
        False: "✘ outputs differ",
    }[race.identical]
    rows = [
        ("tokens", f"{plain.tokens}", f"{spec.tokens}"),
        (
            "target passes",
            f"{plain.target_passes}",
            f"{spec.target_passes} ({saved:+d} saved)" if saved >= 0 else f"{spec.target_passes}",
        ),
        ("draft passes", "0", f"{spec.draft_passes}"),
        ("acceptance rate (accepted / drafted)", "", _pct(spec.acceptance_rate)),
        (
            "… by draft depth 1, 2, … (the path reached it)",
            "",
            " · ".join(f"{100 * r:.0f}%" for r in per_position_acceptance(race.spec.steps)),
        ),
        ("mean tokens per target pass", "1.00", f"{spec.mean_accepted_length:.2f}"),
        ("tokens / s (own clock)", f"{plain.tokens_per_second:.1f}", f"{spec.tokens_per_second:.1f}"),
        ("speedup", "1.00×", f"{race.speedup:.2f}×" if race.speedup else "n/a"),
        ("stopped by", STOP_REASONS[plain.stop_reason], STOP_REASONS[spec.stop_reason]),
        ("greedy outputs", "", identical),
    ]
    body = "".join(
        f"<tr><th>{html.escape(a)}</th><td>{html.escape(b)}</td><td>{html.escape(c)}</td></tr>" for a, b, c in rows
    )
    return f'<table class="summary"><tr><th></th><th>target only</th><th>speculative</th></tr>{body}</table>'


def step_detail_html(step: SpecStep, index: int, total: int, text: TokenText) -> str:
    """One speculative step taken apart: what was drafted, how the target judged each node."""
    refused = dict(refused_nodes(step))
    after_end = step.accepted_after_end
    rows = []
    for node, token in enumerate(step.draft_tokens):
        verdict, outcome = ("accepted", ACCEPTED) if node in step.path else (refused[node], REJECTED)
        if node in after_end:
            verdict = AFTER_END
        q = draft_q(step, node)
        q_text = "1 (n-gram)" if q is None else f"{q:.3f}"
        parent = "root" if step.parents[node] < 0 else f"{step.parents[node] + 1}"
        rows.append(
            f"<tr><td>{node + 1}</td><td>{parent}</td><td>{_span(text(token), outcome, verdict)}</td><td>{q_text}</td>"
            f"<td>{step.target_probs[node]:.3f}</td><td>{step.accept_probs[node]:.3f}</td><td>{html.escape(verdict)}</td></tr>"
        )
    outcome = step.next_outcome
    said = LEGEND[outcome] if step.next_emitted else "not emitted: the answer had ended"
    rows.append(
        f"<tr><td>+</td><td></td><td>{_span(text(step.next_token), outcome, outcome)}</td><td></td>"
        f"<td>{step.next_token_prob:.3f}</td><td></td><td>{html.escape(said)}</td></tr>"
    )
    shape = "a chain of" if step.is_chain else "a tree of"
    below = f"the {len(after_end)} accepted below it and " if after_end else ""
    then = (
        f"then 1 {html.escape(outcome)} token from the target"
        if step.next_emitted
        else f"the answer ended on accepted draft {len(step.emitted_path)}, an end token: {below}the target's own "
        f"token {'were' if after_end else 'was'} not emitted"
    )
    head = (
        f"<p><b>Step {index + 1} of {total}</b>: the draft proposed {shape} {step.drafted_count} tokens in "
        f"{1000 * step.draft_seconds:.0f} ms; one target pass verified them in {1000 * step.verify_seconds:.0f} ms; "
        f"{step.accepted_count} accepted, {then}.</p>"
    )
    table = (
        "<table class='step'><tr><th>#</th><th>parent</th><th>token</th><th>draft q(x)</th><th>target p(x)</th>"
        f"<th>min(1, p/q)</th><th>outcome</th></tr>{''.join(rows)}</table>"
    )
    return f'<div class="step-detail">{head}{table}</div>'


KERNEL_NAMES = {PACKED: "packed (oneDNN)", STOCK: "stock (F.linear)", MKL_PACKED: "packed (MKL)"}


def kernel_table(tuning: TargetTuning) -> list[str]:
    """The target's linear kernels timed per width (a whole pass, ms), the one each width runs in bold; none
    where nothing was timed (no oneDNN for the dtype, a GPU)."""
    seconds = tuning.kernels.seconds
    if not seconds:
        return []
    kernels = [kernel for kernel in KERNELS if kernel_key(kernel, 1) in seconds]
    rows = [
        "",
        f"| tokens a pass | {' | '.join(KERNEL_NAMES[kernel] for kernel in kernels)} |",
        "|---" * (len(kernels) + 1) + "|",
    ]
    for width in range(1, KERNEL_WIDTHS + 1):
        cells = []
        for kernel in kernels:
            ms = f"{1000 * seconds[kernel_key(kernel, width)]:.1f} ms"
            cells.append(f"**{ms}**" if kernel == tuning.plan.kernel(width) else ms)
        rows.append(f"| {width} | {' | '.join(cells)} |")
    return rows + [""]
