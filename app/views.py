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
from specdec_core.events import (
    ARGMAX_MATCH,
    DRAFT_MODEL,
    HEAD,
    LOOKUP,
    LOOKUP_AND_HEAD,
    RATIO,
    RULE_REASONS,
    TARGET_PROB,
    Step,
)
from specdec_core.tree import depths
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
    REJECTED: "draft token rejected (never emitted; a thin red mark per step, hover it to list them)",
    CORRECTION: "target's correction",
    BONUS: "target's bonus token",
    TARGET: "target token (no draft)",
}
SOURCE_NAMES = {
    LOOKUP: "lookup guess (copied from earlier text)",
    HEAD: "head guess",
    DRAFT_MODEL: "draft model guess",
    LOOKUP_AND_HEAD: "lookup and head agreed",
}
# What the number of each rule is called in a hover or a table cell.
RULE_VALUES = {ARGMAX_MATCH: "argmax match", RATIO: "min(1, p/q)", TARGET_PROB: "p(x)"}
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


def _span(text: str, outcome: str, tooltip: str, extra_class: str = "") -> str:
    shown = text if text else "∅"
    classes = f"tok tok-{outcome} {extra_class}".strip()
    return f'<span class="{classes}" title="{html.escape(tooltip)}">{html.escape(shown)}</span>'


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def draft_q(step: SpecStep, node: int) -> float | None:
    """q(x) of a node; None for a model-free guess (an n-gram drafter, or a lookup-only node of the
    hybrid's tree, which carries NaN)."""
    q = step.draft_probs[node] if step.draft_probs is not None else None
    return None if q is None or q != q else q


def node_probs(step: SpecStep, node: int) -> str:
    """A node's numbers as the rule that judged it uses them: where it came from, p, the rule's value, and q only
    where the rule reads it."""
    p, value = step.target_probs[node], step.accept_probs[node]
    source = SOURCE_NAMES[step.sources[node]]
    if step.rule == ARGMAX_MATCH:
        return f"{source} · target p={_pct(p)} · argmax match: {'yes' if value else 'no'}"
    q = draft_q(step, node)
    if step.rule == RATIO:
        return f"{source} · drawn from draft q={_pct(q)} · target p={_pct(p)} · kept with min(1, p/q)={_pct(value)}"
    confidence = "" if q is None else f" · head confidence {_pct(q)} (not used: chosen, not drawn)"
    return f"{source} · kept with p(x)={_pct(value)}{confidence}"


def rule_line(step: SpecStep) -> str:
    """The rule of a step in one line, with why."""
    return f"Rule: {RULE_VALUES[step.rule]}. {RULE_REASONS[step.rule].capitalize()}."


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
    ones (one thin marker whose hover lists them, or inline), then the target's own token."""
    if isinstance(step, PlainStep):
        yield _span(text(step.token), TARGET, f"target p={_pct(step.target_prob)}")
        return
    for node in step.emitted_path:
        yield _span(
            text(step.draft_tokens[node]),
            ACCEPTED,
            f"accepted · {node_probs(step, node)}",
            f"src-{step.sources[node].replace(' ', '-')}",
        )
    refused = refused_nodes(step)
    if refused and inline_rejected:
        for node, what in refused:
            yield _span(text(step.draft_tokens[node]), REJECTED, f"{what} · {node_probs(step, node)}")
    elif refused:
        listed = "; ".join(f"{text(step.draft_tokens[node])!r} ({what.split(' ')[0]})" for node, what in refused)
        title = html.escape(f"{len(refused)} refused drafts: {listed}")
        yield f'<span class="tok tok-marker" data-refused="{len(refused)}" title="{title}"></span>'
    if step.next_emitted:
        outcome = step.next_outcome
        why = {CORRECTION: "target's correction", BONUS: "bonus token after the accepted path ended at a leaf"}.get(
            outcome, "target token (the drafter had nothing to offer)"
        )
        yield _span(text(step.next_token), outcome, f"{why} · target p={_pct(step.next_token_prob)}")


def pane_html(title: str, pane: Pane, text: TokenText, running: bool, inline_rejected: bool = False) -> str:
    spans = "".join(span for step in pane.steps for span in step_spans(step, text, inline_rejected))
    state = "running…" if running else ("done" if pane.summary else "waiting")
    drafted = sum(isinstance(step, SpecStep) and step.drafted_count > 0 for step in pane.steps)
    passes = f"{len(pane.steps)} target passes"
    if drafted:
        passes += f" ({drafted} with a draft, {len(pane.steps) - drafted} plain)"
    stats = (
        f"{pane.token_count} tokens · {passes} · "
        f"{pane.tokens_per_second:.1f} tok/s on its own clock ({pane.clock:.2f} s) · {state}"
    )
    return (
        f'<div class="pane"><div class="pane-head"><b>{html.escape(title)}</b>'
        f'<span class="pane-stats">{html.escape(stats)}</span></div>'
        f'<div class="tokens">{spans}</div></div>'
    )


def legend_html() -> str:
    items = "".join(f'<span class="tok tok-{k}">{html.escape(v)}</span>' for k, v in LEGEND.items())
    lookup = f'<span class="tok tok-accepted src-lookup">{html.escape(SOURCE_NAMES[LOOKUP])}</span>'
    return (
        f'<div class="legend">{items}<span class="tok tok-marker"></span>{lookup}'
        '<span class="hint">hover a token for its probabilities and the rule that kept it</span></div>'
    )


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
    drafted = len(race.spec_steps)
    rows = [
        ("tokens", f"{plain.tokens}", f"{spec.tokens}"),
        (
            "target passes (steps with a draft + plain steps)",
            f"{plain.target_passes}",
            f"{spec.target_passes} = {drafted} + {spec.target_passes - drafted}"
            + (f" ({saved:+d} saved)" if saved >= 0 else ""),
        ),
        ("draft passes", "0", f"{spec.draft_passes}"),
        ("acceptance per drafted node (accepted / drafted)", "", _pct(spec.acceptance_rate)),
        (
            "… by draft depth 1, 2, … (the path reached it)",
            "",
            " · ".join(f"{100 * r:.0f}%" for r in per_position_acceptance(race.spec.steps)),
        ),
        ("accepted drafts by source", "", _by_source(race)),
        ("tokens per target pass (accepted drafts + the target's own)", "1.00", f"{spec.mean_accepted_length:.2f}"),
        ("tokens / s (own clock)", f"{plain.tokens_per_second:.1f}", f"{spec.tokens_per_second:.1f}"),
        ("speedup (tokens / s over target only)", "1.00×", f"{race.speedup:.2f}×" if race.speedup else "n/a"),
        ("acceptance rule", "", "; ".join(sorted({RULE_VALUES[step.rule] for step in race.spec_steps})) or "n/a"),
        ("stopped by", STOP_REASONS[plain.stop_reason], STOP_REASONS[spec.stop_reason]),
        ("greedy outputs", "", identical),
    ]
    body = "".join(
        f"<tr><th>{html.escape(a)}</th><td>{html.escape(b)}</td><td>{html.escape(c)}</td></tr>" for a, b, c in rows
    )
    plain_steps = (
        "Plain steps: the first token (read with the prompt), steps where adaptive k chose no draft, and steps where "
        "the drafter had nothing to offer."
    )
    return (
        f'<table class="summary"><tr><th></th><th>target only</th><th>speculative</th></tr>{body}</table>'
        f"<p class='note'>{plain_steps}</p>"
    )


def accepted_by_source(race: Race) -> dict[str, int]:
    """Accepted draft tokens of the race by the part of the drafter that proposed them."""
    counts: dict[str, int] = {}
    for step in race.spec_steps:
        for node in step.path:
            counts[step.sources[node]] = counts.get(step.sources[node], 0) + 1
    return counts


def _by_source(race: Race) -> str:
    counts = accepted_by_source(race)
    return " · ".join(f"{source}: {counts[source]}" for source in SOURCE_NAMES if source in counts) or "none"


def step_detail_html(step: SpecStep, index: int, total: int, text: TokenText) -> str:
    """One speculative step taken apart: what was drafted, by which part of the drafter, and how the target judged
    each node under the step's rule."""
    refused = dict(refused_nodes(step))
    after_end = step.accepted_after_end
    reads_q = step.rule == RATIO
    rows = []
    for node, token in enumerate(step.draft_tokens):
        verdict, outcome = ("accepted", ACCEPTED) if node in step.path else (refused[node], REJECTED)
        if node in after_end:
            verdict = AFTER_END
        q = draft_q(step, node)
        q_cell = f"<td>{'n/a' if q is None else f'{q:.3f}'}</td>" if reads_q else ""
        value = step.accept_probs[node]
        value_text = ("yes" if value else "no") if step.rule == ARGMAX_MATCH else f"{value:.3f}"
        parent = "root" if step.parents[node] < 0 else f"{step.parents[node] + 1}"
        rows.append(
            f"<tr><td>{node + 1}</td><td>{parent}</td><td>{_span(text(token), outcome, verdict)}</td>"
            f"<td>{html.escape(step.sources[node])}</td>{q_cell}<td>{step.target_probs[node]:.3f}</td>"
            f"<td>{value_text}</td><td>{html.escape(verdict)}</td></tr>"
        )
    outcome = step.next_outcome
    said = LEGEND[outcome] if step.next_emitted else "not emitted: the answer had ended"
    rows.append(
        f"<tr><td>+</td><td></td><td>{_span(text(step.next_token), outcome, outcome)}</td><td>target</td>"
        f"{'<td></td>' if reads_q else ''}<td>{step.next_token_prob:.3f}</td><td></td><td>{html.escape(said)}</td></tr>"
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
        f"<p><b>Step {index + 1} of {total}</b>: the draft proposed {shape} {step.drafted_count} tokens "
        f"({html.escape(draft_makeup(step))}) in {1000 * step.draft_seconds:.0f} ms; one target pass verified them in "
        f"{1000 * step.verify_seconds:.0f} ms; {step.accepted_count} accepted, {then}.</p>"
        f"<p class='note'>{html.escape(rule_line(step))}</p>"
    )
    q_head = "<th>draft q(x)</th>" if reads_q else ""
    table = (
        f"<table class='step'><tr><th>#</th><th>parent</th><th>token</th><th>source</th>{q_head}<th>target p(x)</th>"
        f"<th>{html.escape(RULE_VALUES[step.rule])}</th><th>outcome</th></tr>{''.join(rows)}</table>"
    )
    return f'<div class="step-detail">{head}{table}</div>'


def draft_makeup(step: SpecStep) -> str:
    """What each part of the drafter contributed to a step: the lookup branch's length, the head's nodes and depth
    (the UI's k limits the head's depth, never the lookup's)."""
    from_lookup = [n for n, source in enumerate(step.sources) if source in (LOOKUP, LOOKUP_AND_HEAD)]
    from_model = [n for n, source in enumerate(step.sources) if source in (HEAD, DRAFT_MODEL, LOOKUP_AND_HEAD)]
    parts = []
    if from_lookup:
        parts.append(f"lookup branch of {len(from_lookup)}")
    if from_model:
        who = "head" if any(step.sources[n] != DRAFT_MODEL for n in from_model) else "draft model"
        deepest = max(depths(step.parents)[n] for n in from_model)
        parts.append(f"{who}: {len(from_model)} nodes, depth {deepest}")
    return "; ".join(parts)


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
