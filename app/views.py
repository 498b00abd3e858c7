"""Events to HTML: coloured tokens, legend, summary table, and one step taken apart.

Hand-built HTML because no Gradio component shows per-token colours *and* per-token tooltips
(HighlightedText has no tooltip). Every piece of model or user text goes through html.escape.
"""

from __future__ import annotations

import html
from collections.abc import Iterable

from transformers import PreTrainedTokenizerBase

from specdec_core import ACCEPTED, BONUS, CORRECTION, REJECTED, TARGET, PlainStep, SpecStep, per_position_acceptance
from specdec_core.events import Step

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
    REJECTED: "draft token rejected (never emitted)",
    CORRECTION: "target's correction",
    BONUS: "target's bonus token",
    TARGET: "target token (no draft)",
}


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


def step_spans(step: Step, text: TokenText) -> Iterable[str]:
    """The spans of one step, in the order a reader meets them."""
    if isinstance(step, PlainStep):
        yield _span(text(step.token), TARGET, f"target p={_pct(step.target_prob)}")
        return
    emitted = len(step.emitted_tokens)
    for i, token in enumerate(step.draft_tokens):
        q = "n/a (n-gram guess, q = 1)" if step.draft_probs is None else _pct(step.draft_probs[i])
        probs = f"draft q={q} · target p={_pct(step.target_probs[i])} · accept prob={_pct(step.accept_probs[i])}"
        if i < step.accepted_count:
            if i < emitted:
                yield _span(text(token), ACCEPTED, f"accepted · {probs}")
        elif i == step.accepted_count:
            yield _span(text(token), REJECTED, f"rejected · {probs}")
        else:
            yield _span(text(token), REJECTED, f"discarded unverified after the rejection · {probs}")
    if emitted > step.accepted_count:
        outcome = step.next_outcome
        why = {CORRECTION: "target's correction", BONUS: "bonus token after all drafts were accepted"}.get(
            outcome, "target token (the drafter had nothing to offer)"
        )
        yield _span(text(step.next_token), outcome, f"{why} · target p={_pct(step.next_token_prob)}")


def pane_html(title: str, pane: Pane, text: TokenText, running: bool) -> str:
    spans = "".join(span for step in pane.steps for span in step_spans(step, text))
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
    identical = {None: "n/a: sampling keeps the distribution, not the exact tokens", True: "✔ identical", False: "✘ outputs differ"}[
        race.identical
    ]
    rows = [
        ("tokens", f"{plain.tokens}", f"{spec.tokens}"),
        ("target passes", f"{plain.target_passes}", f"{spec.target_passes} ({saved:+d} saved)" if saved >= 0 else f"{spec.target_passes}"),
        ("draft passes", "0", f"{spec.draft_passes}"),
        ("acceptance rate", "", _pct(spec.acceptance_rate)),
        ("… by draft position 1, 2, …", "", " · ".join(f"{100 * r:.0f}%" for r in per_position_acceptance(race.spec.steps))),
        ("mean tokens per target pass", "1.00", f"{spec.mean_accepted_length:.2f}"),
        ("tokens / s (own clock)", f"{plain.tokens_per_second:.1f}", f"{spec.tokens_per_second:.1f}"),
        ("speedup", "1.00×", f"{race.speedup:.2f}×" if race.speedup else "n/a"),
        ("stopped by", STOP_REASONS[plain.stop_reason], STOP_REASONS[spec.stop_reason]),
        ("greedy outputs", "", identical),
    ]
    body = "".join(f"<tr><th>{html.escape(a)}</th><td>{html.escape(b)}</td><td>{html.escape(c)}</td></tr>" for a, b, c in rows)
    return f'<table class="summary"><tr><th></th><th>target only</th><th>speculative</th></tr>{body}</table>'


def step_detail_html(step: SpecStep, index: int, total: int, text: TokenText) -> str:
    """One speculative step taken apart: what was drafted, how the target judged each token."""
    rows = []
    for i, token in enumerate(step.draft_tokens):
        if i < step.accepted_count:
            verdict, outcome = "accepted", ACCEPTED
        elif i == step.accepted_count:
            verdict, outcome = "rejected: the target resamples here", REJECTED
        else:
            verdict, outcome = "discarded (after a rejection)", REJECTED
        q = "1 (n-gram)" if step.draft_probs is None else f"{step.draft_probs[i]:.3f}"
        rows.append(
            f"<tr><td>{i + 1}</td><td>{_span(text(token), outcome, verdict)}</td><td>{q}</td>"
            f"<td>{step.target_probs[i]:.3f}</td><td>{step.accept_probs[i]:.3f}</td><td>{html.escape(verdict)}</td></tr>"
        )
    outcome = step.next_outcome
    rows.append(
        f"<tr><td>+</td><td>{_span(text(step.next_token), outcome, outcome)}</td><td></td>"
        f"<td>{step.next_token_prob:.3f}</td><td></td><td>{html.escape(LEGEND[outcome])}</td></tr>"
    )
    head = (
        f"<p><b>Step {index + 1} of {total}</b>: the draft proposed {step.drafted_count} tokens in "
        f"{1000 * step.draft_seconds:.0f} ms; one target pass verified them in {1000 * step.verify_seconds:.0f} ms; "
        f"{step.accepted_count} accepted, then 1 {html.escape(outcome)} token from the target.</p>"
    )
    table = (
        "<table class='step'><tr><th>#</th><th>token</th><th>draft q(x)</th><th>target p(x)</th>"
        f"<th>min(1, p/q)</th><th>outcome</th></tr>{''.join(rows)}</table>"
    )
    return f'<div class="step-detail">{head}{table}</div>'
