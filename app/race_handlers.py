"""The Race tab's handlers: the drafter list, the race itself streamed step by step, and its replays."""

from __future__ import annotations

import html
import time
from collections.abc import Iterator
from contextlib import closing
from dataclasses import asdict

import gradio as gr
import plotly.graph_objects as go
import torch

from specdec_core import Finished, Summary, load_model
from specdec_core.drafters import DRAFT_EAGLE, DRAFT_EAGLE_TREE, DRAFT_HYBRID, DRAFT_NGRAM
from specdec_core.machine import this_machine
from specdec_core.models import default_dtype
from specdec_core.tuning import c_at_load

from . import race_charts, rule_charts, views
from .decoders import both_runs, prompted_target
from .inputs import RaceSettings, parse_settings, shown_as_message
from .presets import DRAFT_LABELS, preset_for
from .race import Race, interleave

TIMING_NOTE = (
    "Timing: the two decoders never run at the same time. They take turns, one step each, on the same "
    "CPU cores: whichever has used less compute goes next, and each pane is charged only its own steps' time "
    "(its own clock). So at every moment both panes show how far each decoder gets in the same compute time."
)
CHART_EVERY_SECONDS = 0.5  # the charts are resent whole, so a live race redraws them at most this often


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
    c = c_at_load(target, default_dtype(), drafter)
    return f"{label}; c = {c:.2f} here" if c is not None else f"{label}; c measured at first use"


LESSON_K = 3


def lesson_setting(target: str) -> tuple:
    """One click to the setting a class starts from: a single draft chain at a fixed k, greedy, so every number on
    the page follows the textbook formula (the head's chain where the target has one, else its first draft model)."""
    preset = preset_for(target)
    drafts = preset.drafts if preset else ()
    trees = (DRAFT_HYBRID, DRAFT_EAGLE_TREE, DRAFT_NGRAM)
    chains = [d for d in drafts if d == DRAFT_EAGLE] or [d for d in drafts if d not in trees]
    drafter = chains[0] if chains else gr.skip()
    return drafter, LESSON_K, False, "greedy"


def running_line(target: str, drafter: str) -> str:
    """Which target and drafter a race runs, and on what hardware: the first thing a visitor needs to read a result."""
    preset = preset_for(target)
    where = f"GPU {torch.cuda.get_device_name()}" if torch.cuda.is_available() else f"CPU {this_machine().kind}"
    target_name = html.escape(preset.label if preset else str(target))
    drafter_name = html.escape(DRAFT_LABELS.get(drafter, str(drafter)))
    return (
        f"<p class='note' id='running-line'>Runs target <b>{target_name}</b> "
        f"with drafter <b>{drafter_name}</b> on {html.escape(where)}.</p>"
    )


def run_race(
    prompt: str,
    target: str,
    drafter: str,
    k: float,
    adaptive: bool,
    decoding: str,
    temperature: float,
    top_k: float,
    top_p: float,
    seed: float,
    max_new_tokens: float,
) -> Iterator[tuple]:
    """Streams (target-only pane, speculative pane, charts, summary, details, last race, draft tree, rule picture,
    step slider) per step; the tree view follows the newest drafted step while the race runs."""
    with shown_as_message():
        settings = parse_settings(
            target, drafter, k, adaptive, decoding, temperature, top_k, top_p, seed, max_new_tokens
        )
        yield _loading_note(settings), "", gr.skip(), "", gr.skip(), gr.skip(), gr.skip(), gr.skip(), gr.skip()
        prompted = prompted_target(settings, prompt)
        race = Race(greedy=settings.generation.sampling.greedy, k=settings.draft.k)
        text = views.TokenText(prompted.target.tokenizer)
        last_chart = 0.0
        with closing(interleave(both_runs(settings, prompted))) as steps:
            for side, event in steps:
                race.add(side, event)
                if isinstance(event, Finished):
                    continue
                live = (gr.skip(),) * 4
                if time.monotonic() - last_chart > CHART_EVERY_SECONDS:
                    live, last_chart = (race_charts.race_figure(race), *_tree_views(race, text)), time.monotonic()
                yield _race_views(race, text, running=True) + (live[0], gr.skip(), gr.skip(), gr.skip()) + live[1:]
    last_race = {"race": race, "target": settings.target}
    yield (
        _race_views(race, text, running=False)
        + (
            race_charts.race_figure(race),
            views.summary_html(race),
            race_details(race, text),
            last_race,
        )
        + _tree_views(race, text)
    )


def _tree_views(race: Race, text: views.TokenText) -> tuple[go.Figure, go.Figure, gr.Slider]:
    """The newest drafted step's tree and rule picture, and the step slider set to it."""
    steps = race.spec_steps
    newest = steps[-1] if steps else None
    plain = len(race.spec.steps) - len(steps)
    slider = gr.Slider(
        minimum=1,
        maximum=max(len(steps), 2),
        value=max(len(steps), 1),
        step=1,
        interactive=len(steps) > 1,
        label=f"Step with a draft: {len(steps)} of them; the run also took {plain} plain passes",
    )
    return (
        race_charts.tree_figure(newest, text, len(steps) - 1, len(steps)),
        rule_charts.rule_figure(newest, text),
        slider,
    )


def tree_view(index: float, last: dict | None) -> tuple[go.Figure, go.Figure]:
    """A replayed step of the last race as a tree and as the rule's picture (the slider under the race)."""
    race = last["race"] if last else None
    if race is None or not race.spec_steps:
        return race_charts.tree_figure(None, None), rule_charts.rule_figure(None, None)
    steps = race.spec_steps
    i = max(0, min(int(index) - 1, len(steps) - 1))
    text = views.TokenText(load_model(last["target"]).tokenizer)
    return race_charts.tree_figure(steps[i], text, i, len(steps)), rule_charts.rule_figure(steps[i], text)


def panes_view(inline_rejected: bool, last: dict | None) -> tuple:
    """Both panes of the last race again, with the refused drafts inline or as one marker per step."""
    if not last:
        return gr.skip(), gr.skip()
    text = views.TokenText(load_model(last["target"]).tokenizer)
    race = last["race"]
    return (
        views.pane_html("target only", race.plain, text, False, inline_rejected),
        views.pane_html("speculative", race.spec, text, False, inline_rejected),
    )


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
        "c": race.c,
        "plain": _summary_dict(race.plain.summary),
        "spec": _summary_dict(race.spec.summary),
        "timing": TIMING_NOTE,
    }


def _summary_dict(summary: Summary | None) -> dict | None:
    if summary is None:
        return None
    return {
        **asdict(summary),
        "acceptance_rate": summary.acceptance_rate,
        "mean_accepted_length": summary.mean_accepted_length,
        "tokens_per_second": summary.tokens_per_second,
    }
