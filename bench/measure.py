"""Timing methods side by side: each run interleaved with the others, in rotated order, so that
drift of a noisy machine hits all alike; ratios are medians over repeats of rates measured in the
same repeat. Shared by every bench mode."""

from __future__ import annotations

import json
import resource
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import torch

from specdec_core.config import DraftConfig, GenerationConfig, SamplingConfig
from specdec_core.costs import CONTEXT_TOKENS, LONG_CONTEXT_TOKENS, CostCurve
from specdec_core.engine import autoregressive, speculative
from specdec_core.events import Finished
from specdec_core.stats import draft_pass_seconds, generated_tokens, per_position_acceptance, plain_step_seconds
from training.draft_data import TrainingPrompt, sample_prompts


def bench_prompts(per_workload: int) -> list[tuple[str, TrainingPrompt]]:
    """Held-out prompts, `per_workload` structured and as many creative, the same on every run."""
    held_out = sample_prompts("heldout", 10_000, seed=1)
    return [
        (kind, p) for kind in ("structured", "creative") for p in [p for p in held_out if p.kind == kind][:per_workload]
    ]


@dataclass
class Timing:
    """One method on one prompt: seconds per repeat, tokens, and our own counters where we have them."""

    seconds: list[float] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    acceptance_rate: float | None = None
    mean_accepted_length: float | None = None
    draft_pass_seconds: list[float] = field(default_factory=list)  # per draft pass, from the events
    step_seconds: list[float] = field(default_factory=list)  # per plain step, from the events
    position_acceptance: list[float] = field(default_factory=list)  # accepted / drafted at draft position i

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    @property
    def rates(self) -> list[float]:
        """Tokens per second per repeat: sampled runs of two methods emit different texts, so rates compare,
        times do not."""
        return [n / s for n, s in zip(self.tokens, self.seconds)]

    @property
    def tokens_per_second(self) -> float:
        return statistics.median(self.rates)


def curve_fields(curve: CostCurve) -> dict:
    """A report's record of the verification cost curve T(n)/T(1), n = 1..17: behind CONTEXT_TOKENS cached
    tokens and, where it was measured, behind LONG_CONTEXT_TOKENS (what tree sizes and the hybrid read there)."""
    long = curve.at(LONG_CONTEXT_TOKENS) if curve.long_seconds is not None else None
    return {
        "verify_ratio": curve.ratios,
        "verify_ratio_long": long.ratios if long else None,
        "verify_contexts": [CONTEXT_TOKENS, LONG_CONTEXT_TOKENS],
        "T1_ms": 1000 * curve.seconds[0],
        "T1_ms_long": 1000 * long.seconds[0] if long else None,
        "T5/T1": curve.ratio(5),
        "T9/T1": curve.ratio(9),
    }


def paired_ratio(ours_rates: list[float], their_rates: list[float]) -> float:
    """Median over repeats of the rate ratio within each repeat: runs seconds apart share the machine's state."""
    return statistics.median(a / b for a, b in zip(ours_rates, their_rates))


def ours(model, prompt, tokens: int, stops, drafter=None, draft: DraftConfig | None = None, sampling=SamplingConfig()):
    def run() -> tuple[list[int], list, Finished]:
        config = GenerationConfig(max_new_tokens=tokens, sampling=sampling)
        events = (
            autoregressive(model, prompt, config, stops)
            if drafter is None
            else speculative(model, drafter(), prompt, config, draft, stops)
        )
        *steps, finished = list(events)
        return generated_tokens(steps), steps, finished

    return run


def theirs(model, prompt, tokens: int, stops, **generate_kwargs):
    ids = torch.tensor([prompt])

    def run() -> tuple[list[int], list, None]:
        out = model.generate(ids, max_new_tokens=tokens, do_sample=False, eos_token_id=list(stops), **generate_kwargs)
        return out[0, len(prompt) :].tolist(), [], None

    return run


def measure(
    methods: dict[str, Callable], repeats: int, between: Callable[[], object] | None = None
) -> tuple[dict[str, Timing], dict[str, list[int]]]:
    """Times every method once per repeat; between (if given) runs after each repeat: a measurement of the
    machine's state to pair with the timings (bandwidth.py reads the bandwidth there)."""
    timings = {name: Timing() for name in methods}
    outputs: dict[str, list[int]] = {}
    names = list(methods)
    for repeat in range(repeats):
        for name in names[repeat % len(names) :] + names[: repeat % len(names)]:  # interleaved, rotated
            run = methods[name]
            started = time.perf_counter()
            tokens, steps, finished = run()
            timings[name].seconds.append(time.perf_counter() - started)
            timings[name].tokens.append(len(tokens))
            outputs[name] = tokens
            if finished is not None:
                record_counters(timings[name], steps, finished)
        if between is not None:
            between()
    return timings, outputs


def record_counters(timing: Timing, steps: list, finished: Finished) -> None:
    s = finished.summary
    timing.acceptance_rate = s.acceptance_rate
    timing.mean_accepted_length = s.mean_accepted_length
    timing.draft_pass_seconds += draft_pass_seconds(steps)
    timing.step_seconds += plain_step_seconds(steps)
    timing.position_acceptance = per_position_acceptance(steps)


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def write_report(report: dict, folder: str, kind: str) -> None:
    out = Path(folder)
    out.mkdir(exist_ok=True)
    path = out / f"{kind}-{datetime.now():%Y%m%d-%H%M%S}.json"
    path.write_text(json.dumps(report, indent=2))
    if kind == "costs":
        print(
            json.dumps(
                {
                    k: report[k]
                    for k in (
                        "machine",
                        "target_kernels",
                        "T1_ms",
                        "T5/T1",
                        "T9/T1",
                        "c_at_load",
                        "draft_kernels",
                        "summary",
                    )
                },
                indent=1,
            )
        )
    print(f"\nwrote {path}")
