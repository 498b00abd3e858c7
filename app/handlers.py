"""Gradio event handlers: top-level generators that turn raw inputs into core calls and events into views.

Inputs arrive from the browser or from the API as whatever the caller sent, so each is
converted and checked here; any SpecDecError becomes a gr.Error, a message in the UI that
leaves the app working.
"""

from __future__ import annotations

import csv
import html
import json
import tempfile
import time
from collections.abc import Iterator
from contextlib import closing
from dataclasses import asdict, dataclass
from pathlib import Path

import gradio as gr
import torch

from specdec_core import (
    DraftConfig,
    Finished,
    GenerationConfig,
    SamplingConfig,
    SpecDecError,
    autoregressive,
    encode_prompt,
    generated_tokens,
    load_model,
    make_drafter,
    speculative,
    stop_token_ids,
)
from specdec_core.machine import this_machine
from specdec_core.drafters import DRAFT_NGRAM
from specdec_core.models import default_dtype
from specdec_core.tuning import CONTEXT_TOKENS, LONG_CONTEXT_TOKENS, draft_pass, measured_cost_ratio, tuning_of

from . import charts, views
from .presets import DRAFT_LABELS, default_target, preset_for
from .limits import MAX_K, MAX_NEW_TOKENS, RUN_SECONDS
from .race import PLAIN, SPEC, Race, interleave
from .workloads import select_prompts

TIMING_NOTE = (
    "Timing: the two decoders never run at the same time. They take turns, one step each, on the same "
    "CPU cores: whichever has used less compute goes next, and each pane is charged only its own steps' time "
    "(its own clock). So at every moment both panes show how far each decoder gets in the same compute time."
)
CHART_EVERY_SECONDS = 0.5


@dataclass(frozen=True, slots=True)
class RaceSettings:
    target: str
    drafter: str
    generation: GenerationConfig
    draft: DraftConfig


def _number(name: str, value: object, integer: bool = False) -> float | int:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise SpecDecError(f"{name} must be a number, got {value!r}.") from None
    if integer:
        if number != int(number):
            raise SpecDecError(f"{name} must be a whole number, got {value!r}.")
        return int(number)
    return number


def parse_settings(
    target: str, drafter: str, k: object, adaptive: object, decoding: str,
    temperature: object, top_k: object, top_p: object, seed: object, max_new_tokens: object,
) -> RaceSettings:
    tokens = _number("max new tokens", max_new_tokens, integer=True)
    if tokens > MAX_NEW_TOKENS:
        raise SpecDecError(f"max new tokens is limited to {MAX_NEW_TOKENS} here, got {tokens}.")
    draft_length = _number("draft length k", k, integer=True)
    if draft_length > MAX_K:
        raise SpecDecError(f"draft length k is limited to {MAX_K} here, got {draft_length}.")
    if decoding not in ("greedy", "sampling"):
        raise SpecDecError(f"decoding must be 'greedy' or 'sampling', got {decoding!r}.")
    sampling = SamplingConfig(
        temperature=0.0 if decoding == "greedy" else _number("temperature", temperature),
        top_k=_number("top-k", top_k, integer=True),
        top_p=_number("top-p", top_p),
        seed=_number("seed", seed, integer=True),
    )
    if decoding == "sampling" and sampling.temperature == 0:
        raise SpecDecError("Sampling needs a temperature above 0 (or choose greedy).")
    return RaceSettings(
        target=target,
        drafter=drafter,
        generation=GenerationConfig(max_new_tokens=tokens, max_seconds=RUN_SECONDS, sampling=sampling),
        draft=DraftConfig(k=draft_length, adaptive=bool(adaptive)),
    )


def drafter_choices(target: str) -> gr.Dropdown:
    """The drafters that fit the chosen target preset (any model id may still be typed), labelled with
    their cost c as measured on this machine once loaded."""
    preset = preset_for(target)
    drafts = preset.drafts if preset else tuple(DRAFT_LABELS)
    return gr.Dropdown(choices=[(drafter_label(target, d), d) for d in drafts], value=drafts[0])


def drafter_label(target: str, drafter: str) -> str:
    label = DRAFT_LABELS.get(drafter, f"draft model: {drafter}")
    if drafter == DRAFT_NGRAM:
        return label
    c = measured_cost_ratio(target, default_dtype(), drafter)
    return f"{label}; c = {c:.2f} here" if c is not None else f"{label}; c measured at first use"


def running_line(target: str, drafter: str) -> str:
    """Which target and drafter a race runs, and on what hardware: the first thing a visitor needs to read a result."""
    preset = preset_for(target)
    where = f"GPU {torch.cuda.get_device_name()}" if torch.cuda.is_available() else f"CPU {this_machine().kind}"
    return (f"<p class='note' id='running-line'>Runs target <b>{html.escape(preset.label if preset else str(target))}</b> "
            f"with drafter <b>{html.escape(DRAFT_LABELS.get(drafter, str(drafter)))}</b> on {html.escape(where)}.</p>")


def machine_view(last: dict | None) -> tuple[str, object]:
    """This machine's measured costs for the last race's target (or the default): kernels, the
    verification cost curve, each drafter's c."""
    target = last["target"] if last else default_target()
    tuning = tuning_of(target, default_dtype())
    if tuning is None:
        return (f"**{this_machine().kind}.** Costs are measured when `{target}` first loads on this machine "
                "(a few seconds, then cached): run a race, then come back."), gr.skip()
    curve = tuning.curve
    lines = [
        f"**Measured on this machine**: {this_machine().kind}; target `{target}`.",
        f"- {tuning.kernels.describe(timings=False)}",  # the timings follow as a table by width
        *views.kernel_table(tuning),
        f"- one target pass behind {CONTEXT_TOKENS} cached tokens: {1000 * curve.seconds[0]:.1f} ms for 1 token; {curve.describe()}",
    ]
    if curve.long_seconds is not None:  # trees, the hybrid and the adaptive k read the curve at each step's context
        long = curve.at(LONG_CONTEXT_TOKENS)
        lines.append(f"- behind {LONG_CONTEXT_TOKENS:,} cached tokens: {1000 * long.seconds[0]:.1f} ms for 1 token; {long.describe()}")
    preset = preset_for(target)
    for drafter in preset.drafts if preset else ():
        measured = draft_pass(target, drafter)
        if measured is not None:
            seconds, how = measured
            lines.append(f"- {DRAFT_LABELS.get(drafter, drafter)}: {1000 * seconds:.2f} ms per draft pass ({how}), "
                         f"c = {measured_cost_ratio(target, default_dtype(), drafter):.3f}")
    steps = last["race"].spec_steps if last else []
    trees = [step for step in steps if not step.is_chain]
    if trees:
        sizes = [step.drafted_count for step in trees]
        lines.append(f"- draft trees of your last race: {len(trees)} steps, {min(sizes)}-{max(sizes)} nodes "
                     f"(mean {sum(sizes) / len(sizes):.1f}), sized by the curve at each step's context: the number of best nodes (by their path's draft "
                     "probability) with the most expected tokens per unit of the step's cost")
    return "\n".join(lines), charts.cost_curve_figure(curve)


def _prepare(settings: RaceSettings, prompt: str):
    target = load_model(settings.target)
    prompt_ids = encode_prompt(target.tokenizer, prompt)
    return target, prompt_ids, stop_token_ids(target.tokenizer, target.model)


def _runs(settings: RaceSettings, target, prompt_ids, stops, draft: DraftConfig | None = None):
    drafter = make_drafter(settings.drafter, target)
    return {
        PLAIN: autoregressive(target.model, prompt_ids, settings.generation, stops),
        SPEC: speculative(target.model, drafter, prompt_ids, settings.generation, draft or settings.draft, stops),
    }


def run_race(
    prompt: str, target: str, drafter: str, k: float, adaptive: bool, decoding: str,
    temperature: float, top_k: float, top_p: float, seed: float, max_new_tokens: float,
) -> Iterator[tuple]:
    """Streams (target-only pane, speculative pane, charts, summary, details, last race, draft tree,
    tree step slider) per step; the tree view follows the newest drafted step while the race runs."""
    try:
        settings = parse_settings(target, drafter, k, adaptive, decoding, temperature, top_k, top_p, seed, max_new_tokens)
        yield _loading_note(settings), "", gr.skip(), "", gr.skip(), gr.skip(), gr.skip(), gr.skip()
        loaded, prompt_ids, stops = _prepare(settings, prompt)
        race = Race(greedy=settings.generation.sampling.greedy, k=settings.draft.k)
        text = views.TokenText(loaded.tokenizer)
        last_chart = 0.0
        with closing(interleave(_runs(settings, loaded, prompt_ids, stops))) as steps:
            for side, event in steps:
                race.add(side, event)
                if isinstance(event, Finished):
                    continue
                live = (gr.skip(),) * 3
                if time.monotonic() - last_chart > CHART_EVERY_SECONDS:
                    live, last_chart = (charts.race_figure(race), *_tree_views(race, text)), time.monotonic()
                yield _race_views(race, text, running=True) + (live[0], gr.skip(), gr.skip(), gr.skip()) + live[1:]
    except SpecDecError as error:
        raise gr.Error(str(error)) from None
    yield _race_views(race, text, running=False) + (
        charts.race_figure(race), views.summary_html(race), race_details(race, text), {"race": race, "target": settings.target},
    ) + _tree_views(race, text)


def _tree_views(race: Race, text: views.TokenText) -> tuple:
    """The newest drafted step's tree, and the step slider set to it."""
    steps = race.spec_steps
    figure = charts.tree_figure(steps[-1] if steps else None, text, len(steps) - 1, len(steps))
    return figure, gr.Slider(minimum=1, maximum=max(len(steps), 2), value=max(len(steps), 1), step=1, interactive=len(steps) > 1)


def tree_view(index: float, last: dict | None):
    """A replayed step of the last race as a tree (the slider under the race)."""
    race = last["race"] if last else None
    if race is None or not race.spec_steps:
        return charts.tree_figure(None, None)
    steps = race.spec_steps
    i = max(0, min(int(index) - 1, len(steps) - 1))
    return charts.tree_figure(steps[i], views.TokenText(load_model(last["target"]).tokenizer), i, len(steps))


def panes_view(inline_rejected: bool, last: dict | None):
    """Both panes of the last race again, with the refused drafts inline or as one marker per step."""
    if not last:
        return gr.skip(), gr.skip()
    text = views.TokenText(load_model(last["target"]).tokenizer)
    race = last["race"]
    return (views.pane_html("target only", race.plain, text, False, inline_rejected),
            views.pane_html("speculative", race.spec, text, False, inline_rejected))


def _loading_note(settings: RaceSettings) -> str:
    return (
        f"<div class='pane'><div class='pane-head'><b>Loading {settings.target} and the draft…</b></div>"
        "<div class='tokens'>The first run after a start loads the models (the embedded default converts its "
        "GGUF file once, about 20 s; later starts take about a second).</div></div>"
    )


def _race_views(race: Race, text: views.TokenText, running: bool) -> tuple[str, str]:
    return (
        views.pane_html("target only", race.plain, text, running and race.plain.summary is None),
        views.pane_html("speculative", race.spec, text, running and race.spec.summary is None),
    )


def race_details(race: Race, text: views.TokenText) -> dict:
    """Everything a script needs from one race (the API's JSON output)."""
    def decoded(tokens: list[int]) -> str:
        return "".join(text(t) for t in tokens)

    return {
        "plain_text": decoded(race.plain.tokens),
        "spec_text": decoded(race.spec.tokens),
        "plain_tokens": race.plain.tokens,
        "spec_tokens": race.spec.tokens,
        "identical": race.identical,
        "speedup": race.speedup,
        "acceptance_rate": race.acceptance_rate,
        "cost_ratio": race.cost_ratio,
        "plain": _summary_dict(race.plain.summary),
        "spec": _summary_dict(race.spec.summary),
        "timing": TIMING_NOTE,
    }


def _summary_dict(summary) -> dict | None:
    if summary is None:
        return None
    return {
        **asdict(summary),
        "acceptance_rate": summary.acceptance_rate,
        "mean_accepted_length": summary.mean_accepted_length,
        "tokens_per_second": summary.tokens_per_second,
    }


def _complete(run) -> tuple[list[int], object]:
    """Runs one decoder to the end; returns its tokens and summary."""
    *steps, finished = list(run)
    return generated_tokens(steps), finished.summary


def run_workload(
    sets: list[str], own_prompts: str, own_temperature: float, target: str, drafter: str,
    k: float, adaptive: bool, max_new_tokens: float,
) -> Iterator[tuple]:
    """Each prompt through both decoders in turn; yields (status, table, chart, download files)."""
    try:
        prompts = select_prompts(list(sets or []), own_prompts, _number("temperature", own_temperature))
        rows: list[dict] = []
        for i, item in enumerate(prompts):
            yield f"Running prompt {i + 1} of {len(prompts)}: {item.workload} / {item.name}…", _table(rows), gr.skip(), gr.skip()
            decoding = "greedy" if item.temperature == 0 else "sampling"
            settings = parse_settings(target, drafter, k, adaptive, decoding, item.temperature, 0, 1.0, 0, max_new_tokens)
            loaded, prompt_ids, stops = _prepare(settings, item.text)
            runs = _runs(settings, loaded, prompt_ids, stops)
            plain_tokens, plain = _complete(runs[PLAIN])
            spec_tokens, spec = _complete(runs[SPEC])
            rows.append(_workload_row(item, plain, spec, plain_tokens == spec_tokens if decoding == "greedy" else None))
            yield f"Done {i + 1} of {len(prompts)}.", _table(rows), charts.workload_figure(rows), gr.skip()
    except SpecDecError as error:
        raise gr.Error(str(error)) from None
    yield _advice(rows), _table(rows), charts.workload_figure(rows), _write_downloads(rows)


def _workload_row(item, plain, spec, identical: bool | None) -> dict:
    return {
        "workload": item.workload,
        "prompt": item.name,
        "temperature": item.temperature,
        "tokens_plain": plain.tokens,
        "tokens_spec": spec.tokens,
        "tok_s_plain": round(plain.tokens_per_second, 2),
        "tok_s_spec": round(spec.tokens_per_second, 2),
        "speedup": round(spec.tokens_per_second / plain.tokens_per_second, 3) if plain.tokens_per_second else 0.0,
        "acceptance_rate": None if spec.acceptance_rate is None else round(spec.acceptance_rate, 3),
        "mean_accepted_length": round(spec.mean_accepted_length, 2),
        "identical": identical,
    }


TABLE_COLUMNS = ["workload", "prompt", "temperature", "tok_s_plain", "tok_s_spec", "speedup", "acceptance_rate", "mean_accepted_length", "identical"]
# What the tables show above each field (the CSV/JSON downloads keep the field names).
COLUMN_HEADERS = {
    "workload": "Workload",
    "prompt": "Prompt",
    "temperature": "Temperature",
    "tok_s_plain": "Plain (tokens/s)",
    "tok_s_spec": "Speculative (tokens/s)",
    "speedup": "Speedup (×)",
    "acceptance_rate": "Acceptance (accepted / drafted)",
    "mean_accepted_length": "Tokens per target pass",
    "identical": "Same output as plain (greedy)",
    "k": "Draft length k",
}


def _table(rows: list[dict]) -> list[list]:
    return [[r[c] for c in TABLE_COLUMNS] for r in rows]


def _advice(rows: list[dict]) -> str:
    lines = ["**Per workload** (tokens per second of all its prompts together):"]
    for workload in dict.fromkeys(r["workload"] for r in rows):
        mine = [r for r in rows if r["workload"] == workload]
        plain_s = sum(r["tokens_plain"] / r["tok_s_plain"] for r in mine if r["tok_s_plain"])
        spec_s = sum(r["tokens_spec"] / r["tok_s_spec"] for r in mine if r["tok_s_spec"])
        speedup = (sum(r["tokens_spec"] for r in mine) / spec_s) / (sum(r["tokens_plain"] for r in mine) / plain_s)
        verdict = "speculation pays" if speedup > 1.05 else ("no gain: leave it off" if speedup < 0.95 else "a wash")
        lines.append(f"- **{workload}**: {speedup:.2f}× over {len(mine)} prompts{_spread(mine)}: {verdict}.")
    lines.append(
        "\nThe gain depends on the workload: measure yours both ways before making speculation a global setting."
    )
    return "\n".join(lines)


def _spread(rows: list[dict]) -> str:
    """The per-prompt range, so that a verdict read off a few prompts shows how far they disagree."""
    if len(rows) < 2:
        return ""
    speedups = [r["speedup"] for r in rows]
    return f" (each prompt {min(speedups):.2f}× to {max(speedups):.2f}×)"


def _write_downloads(rows: list[dict]) -> list[str]:
    folder = Path(tempfile.mkdtemp(prefix="workload-check-"))
    json_path, csv_path = folder / "workload_check.json", folder / "workload_check.csv"
    json_path.write_text(json.dumps(rows, indent=2))
    with csv_path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return [str(csv_path), str(json_path)]


def run_sweep(prompt: str, target: str, drafter: str, max_new_tokens: float) -> Iterator[tuple]:
    """Greedy speedup and acceptance for k = 1..8 against one plain run; yields (status, chart, table)."""
    try:
        settings = parse_settings(target, drafter, 1, False, "greedy", 0, 0, 1.0, 0, max_new_tokens)
        yield "Running plain decoding once as the baseline…", gr.skip(), []
        loaded, prompt_ids, stops = _prepare(settings, prompt)
        _, plain = _complete(autoregressive(loaded.model, prompt_ids, settings.generation, stops))
        rows: list[dict] = []
        for k in range(1, 9):
            spec_run = _runs(settings, loaded, prompt_ids, stops, DraftConfig(k=k))[SPEC]
            _, spec = _complete(spec_run)
            rows.append({
                "k": k,
                "speedup": round(spec.tokens_per_second / plain.tokens_per_second, 3),
                "acceptance_rate": None if spec.acceptance_rate is None else round(spec.acceptance_rate, 3),
                "mean_accepted_length": round(spec.mean_accepted_length, 2),
            })
            yield f"k = {k} done.", charts.sweep_figure(rows), [list(r.values()) for r in rows]
    except SpecDecError as error:
        raise gr.Error(str(error)) from None
    best = max(rows, key=lambda r: r["speedup"])
    yield f"Best k = {best['k']}: {best['speedup']:.2f}× (acceptance {best['acceptance_rate']}).", charts.sweep_figure(rows), [list(r.values()) for r in rows]


def theory_view(a: float, c: float, k: float, last: dict | None):
    target = last["target"] if last else default_target()
    tuning = tuning_of(target, default_dtype())
    return charts.theory_figure(float(a), float(c), int(k), last["race"] if last else None, tuning.curve if tuning else None)


def tree_theory_view(a: float, a_width: float, width: float, c: float, last: dict | None):
    target = last["target"] if last else default_target()
    tuning = tuning_of(target, default_dtype())
    return charts.chain_vs_tree_figure(float(a), float(a_width), int(width), float(c), tuning.curve if tuning else None)


def measured_values(last: dict | None):
    """The last race's measured a and c, to put on the sliders."""
    race = last["race"] if last else None
    if race is None or race.acceptance_rate is None or race.cost_ratio is None:
        return gr.skip(), gr.skip(), gr.skip()
    return round(race.acceptance_rate, 3), round(min(race.cost_ratio, 2.0), 3), race.k


def step_view(index: float, last: dict | None) -> str:
    race = last["race"] if last else None
    if race is None or not race.spec_steps:
        return "<p>Run a race first: the step-through replays the real steps of your last race.</p>"
    steps = race.spec_steps
    i = max(0, min(int(index) - 1, len(steps) - 1))
    return views.step_detail_html(steps[i], i, len(steps), views.TokenText(load_model(last["target"]).tokenizer))


def step_slider(last: dict | None) -> gr.Slider:
    total = len(last["race"].spec_steps) if last else 0
    return gr.Slider(minimum=1, maximum=max(total, 2), value=1, step=1, interactive=total > 1)
