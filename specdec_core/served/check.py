"""A workload check against a served model: each prompt sent alone, the server's speculative counters read
before and after it, and optionally the same prompt on a second server running the same model without
speculation, for a measured speedup.

Counts follow the server's own definitions (metrics.SpecCounters): tokens per pass is 1 + accepted / drafts, over
the passes that verified a draft.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from .client import Completion, ServerClient
from .metrics import NO_COUNTS, SpecCounters

SETTLE_SECONDS = 2.0  # how long the counters may lag the stream's end
SETTLE_PAUSE = 0.05
PAYS, WASH = 1.05, 0.95  # the verdict's bounds on speedup, as in the local check


@dataclass(frozen=True, slots=True)
class ServedPrompt:
    workload: str
    name: str
    text: str
    temperature: float


@dataclass(frozen=True, slots=True)
class PromptResult:
    """One prompt on the server (and on the baseline server, where one is given)."""

    prompt: ServedPrompt
    completion: Completion
    metrics_counts: SpecCounters | None  # the counters' change over the prompt; None: the server exposes none
    baseline: Completion | None = None

    @property
    def counts(self) -> SpecCounters | None:
        """The request's own counts where its response carries them, else the counters' change over it."""
        return self.completion.counts if self.completion.counts is not None else self.metrics_counts

    @property
    def counted_by(self) -> str:
        if self.completion.counts is not None:
            return "response"
        return "/metrics" if self.metrics_counts is not None else "none"

    @property
    def speedup(self) -> float | None:
        if self.baseline is None or not self.baseline.tokens_per_second:
            return None
        return self.completion.tokens_per_second / self.baseline.tokens_per_second


@dataclass(frozen=True, slots=True)
class SetResult:
    """One workload's prompts together: counts summed, tokens per second over all their tokens and seconds."""

    workload: str
    prompts: int
    counts: SpecCounters | None
    tokens_per_second: float
    baseline_tokens_per_second: float | None
    speedups: tuple[float, ...]  # each prompt's, where a baseline ran

    @property
    def speedup(self) -> float | None:
        if not self.baseline_tokens_per_second:
            return None
        return self.tokens_per_second / self.baseline_tokens_per_second

    @property
    def verdict(self) -> str:
        if self.speedup is None:
            return "no baseline server given: acceptance only, no speedup measured"
        if self.speedup > PAYS:
            return "speculation pays"
        return "no gain: leave it off" if self.speedup < WASH else "a wash"


def check_prompt(
    server: ServerClient,
    prompt: ServedPrompt,
    max_tokens: int,
    max_seconds: float,
    baseline: ServerClient | None = None,
) -> PromptResult:
    """The prompt on the server, its counters around it (and its own counts, where the response carries them);
    then on the baseline server, where given."""
    before = server.counters()
    completion = server.complete(prompt.text, max_tokens, prompt.temperature, max_seconds)
    counts = None if before is None else settled(server, before).minus(before)
    base = baseline.complete(prompt.text, max_tokens, prompt.temperature, max_seconds) if baseline else None
    return PromptResult(prompt, completion, counts, base)


def settled(server: ServerClient, before: SpecCounters) -> SpecCounters:
    """The counters once nothing of the request is pending: vLLM records a step's counts just after it queues the
    step's output, so they are read again after a pause until two reads agree (within SETTLE_SECONDS)."""
    deadline = time.monotonic() + SETTLE_SECONDS
    now = server.counters() or before
    while time.monotonic() < deadline:
        time.sleep(SETTLE_PAUSE)
        again = server.counters() or before
        if again == now:
            break
        now = again
    return now


def draft_length(server: ServerClient) -> int | None:
    """The server's k: vLLM counts acceptances at each of its k draft positions from the start; None without
    counters."""
    counts = server.counters()
    return len(counts.accepted_by_position) if counts is not None and counts.accepted_by_position else None


def by_workload(results: list[PromptResult]) -> list[SetResult]:
    """One SetResult per workload, in the order the workloads first appear."""
    return [_set_result(w, [r for r in results if r.prompt.workload == w]) for w in _workloads(results)]


def _workloads(results: list[PromptResult]) -> list[str]:
    return list(dict.fromkeys(r.prompt.workload for r in results))


def _set_result(workload: str, results: list[PromptResult]) -> SetResult:
    counted = [r.counts for r in results if r.counts is not None]
    counts = None
    if counted:
        counts = NO_COUNTS
        for c in counted:
            counts = counts.plus(c)
    baselines = [r.baseline for r in results if r.baseline is not None]
    return SetResult(
        workload=workload,
        prompts=len(results),
        counts=counts,
        tokens_per_second=_rate([r.completion for r in results]),
        baseline_tokens_per_second=_rate(baselines) if len(baselines) == len(results) else None,
        speedups=tuple(s for r in results if (s := r.speedup) is not None),
    )


def _rate(completions: list[Completion]) -> float:
    seconds = sum(c.seconds for c in completions)
    return sum(c.completion_tokens for c in completions) / seconds if seconds else 0.0


def prompt_record(result: PromptResult) -> dict:
    """One prompt's figures by field name, for tables and the CSV/JSON downloads (no address, no key)."""
    return {
        "workload": result.prompt.workload,
        "prompt": result.prompt.name,
        "temperature": result.prompt.temperature,
        "completion_tokens": result.completion.completion_tokens,
        "first_token_s": round(result.completion.first_token_seconds, 3),
        "tok_s": round(result.completion.tokens_per_second, 2),
        "counted_by": result.counted_by,  # "response", "/metrics" or "none"
        **counts_record(result.counts),
        "baseline_tok_s": None if result.baseline is None else round(result.baseline.tokens_per_second, 2),
        "speedup": _rounded(result.speedup),
    }


def counts_record(counts: SpecCounters | None) -> dict:
    """Counts and the figures made of them by field name; None (by position: empty) without counters."""
    return {
        "drafts": None if counts is None else counts.drafts,
        "draft_tokens": None if counts is None else counts.draft_tokens,
        "accepted": None if counts is None else counts.accepted,
        "acceptance_rate": _rounded(None if counts is None else counts.acceptance_rate),
        "tokens_per_pass": _rounded(None if counts is None else counts.tokens_per_pass),
        "acceptance_by_position": [] if counts is None else [round(a, 3) for a in counts.acceptance_by_position],
    }


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
