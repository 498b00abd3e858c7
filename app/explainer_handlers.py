"""The Explainer tab's handlers: the theory charts, this machine's measured costs, and the step-through
of the visitor's last race (the explainer's texts are in explainer.py)."""

from __future__ import annotations

import gradio as gr
import plotly.graph_objects as go

from specdec_core import SpecStep, load_model
from specdec_core.compile_jobs import compile_state
from specdec_core.costs import CONTEXT_TOKENS, LONG_CONTEXT_TOKENS, CostCurve
from specdec_core.machine import this_machine
from specdec_core.models import default_dtype
from specdec_core.tuning import PASSES, TargetTuning, c_at_load, draft_pass, tuning_of

from . import explainer_charts, rule_charts, views
from .explainer import NO_RACE_YET, race_point_text, tree_agreement
from .explainer_point import fit, race_point
from .presets import DRAFT_LABELS, default_target, preset_for


def _target(last: dict | None) -> str:
    """The last race's target, or the default before any race."""
    return last["target"] if last else default_target()


def _measured_curve(last: dict | None) -> CostCurve | None:
    tuning = tuning_of(_target(last), default_dtype())
    return tuning.curve if tuning else None


def theory_view(a: float, c: float, k: float, last: dict | None) -> go.Figure:
    race = last["race"] if last else None
    return explainer_charts.theory_figure(float(a), float(c), int(k), race, _measured_curve(last))


def race_point_view(last: dict | None) -> str:
    """The measurements behind the last race's star and the a, c, k fitted to them."""
    race = last["race"] if last else None
    point = race_point(race) if race else None
    if point is None:
        return NO_RACE_YET
    return race_point_text(point, fit(point, _measured_curve(last)), race.acceptance_rate, race.k)


def tree_theory_view(a: float, a_width: float, width: float, c: float, last: dict | None) -> go.Figure:
    return explainer_charts.chain_vs_tree_figure(float(a), float(a_width), int(width), float(c), _measured_curve(last))


def raised_tree_agreement(a: float, a_width: float) -> float:
    """The tree's best-of-level agreement, raised when a moved above it (the best guess of several is right at
    least as often as the first)."""
    return tree_agreement(float(a)) if a_width < a else gr.skip()


def machine_view(last: dict | None) -> tuple[str, str, object]:
    """This machine's measured costs for the last race's target (or the default): the verification cost curve,
    each drafter's c; apart, the kernels timed by pass width."""
    target = _target(last)
    tuning = tuning_of(target, default_dtype())
    if tuning is None:
        return (
            (
                f"**{this_machine().kind}.** Costs are measured when `{target}` first loads on this machine "
                "(a few seconds, then cached): run a race, then come back."
            ),
            gr.skip(),
            gr.skip(),
        )
    lines = [
        f"**Measured on this machine**: {this_machine().kind}; target `{target}`.",
        f"- the pass that runs, whose costs these are: {PASSES[tuning.pass_in_use]}",
        _compile_line(target),
        *_c_lines(tuning),
        *_drafter_cost_lines(target),
        *_tree_size_lines(last),
    ]
    kernels = "\n".join(
        [f"{tuning.kernels.describe(timings=False)}; a whole pass by kernel:", *views.kernel_table(tuning)]
    )
    return "\n".join(lines), kernels, explainer_charts.cost_curve_figure(tuning.curve)


def _compile_line(target: str) -> str:
    """Where compiling the target's passes stands: compiling (the lean pass serves meanwhile), in use, or why not."""
    state = compile_state(target)
    return f"- compiled passes: {state.state}; {state.detail}"


def _c_lines(tuning: TargetTuning) -> list[str]:
    """One target pass's time by width, at a short and (where measured) a long context."""
    curve = tuning.curve
    lines = [
        f"- one target pass behind {CONTEXT_TOKENS} cached tokens: {1000 * curve.seconds[0]:.1f} ms for 1 token; "
        f"{curve.describe()}",
    ]
    if curve.long_seconds is not None:  # trees, the hybrid and the adaptive k read the curve at each step's context
        long = curve.at(LONG_CONTEXT_TOKENS)
        lines.append(
            f"- behind {LONG_CONTEXT_TOKENS:,} cached tokens: {1000 * long.seconds[0]:.1f} ms for 1 token; "
            f"{long.describe()}"
        )
    return lines


def _drafter_cost_lines(target: str) -> list[str]:
    """Each of the target preset's drafters measured here: one draft pass, and c."""
    preset = preset_for(target)
    lines = []
    for drafter in preset.drafts if preset else ():
        measured = draft_pass(target, drafter)
        if measured is not None:
            seconds, how = measured
            lines.append(
                f"- {DRAFT_LABELS.get(drafter, drafter)}: {1000 * seconds:.2f} ms per draft pass ({how}), "
                f"c = {c_at_load(target, default_dtype(), drafter):.3f}"
            )
    return lines


def _tree_size_lines(last: dict | None) -> list[str]:
    """How large the last race's draft trees were, and what sized them."""
    steps = last["race"].spec_steps if last else []
    trees = [step for step in steps if not step.is_chain]
    if not trees:
        return []
    sizes = [step.drafted_count for step in trees]
    return [
        f"- draft trees of your last race: {len(trees)} steps, {min(sizes)}-{max(sizes)} nodes "
        f"(mean {sum(sizes) / len(sizes):.1f}), sized by the curve at each step's context: the number of best "
        "nodes (by their path's draft probability) with the most expected tokens per unit of the step's cost"
    ]


def measured_values(last: dict | None) -> tuple:
    """The a, c and k fitted to the last race's measured point, to put on the sliders: their curve meets its star."""
    point = race_point(last["race"]) if last else None
    if point is None:
        return gr.skip(), gr.skip(), gr.skip()
    fitted = fit(point, _measured_curve(last))
    return fitted.a, fitted.c, fitted.k


def _picked(index: float, last: dict | None) -> tuple[int, list[SpecStep]] | None:
    """The slider's step of the last race (0-based, within its speculative steps) and those steps; None before
    a race that drafted."""
    steps = last["race"].spec_steps if last else []
    return (max(0, min(int(index) - 1, len(steps) - 1)), steps) if steps else None


def step_view(index: float, last: dict | None) -> str:
    picked = _picked(index, last)
    if picked is None:
        return "<p>Run a race first: the step-through replays the real steps of your last race.</p>"
    i, steps = picked
    return views.step_detail_html(steps[i], i, len(steps), views.TokenText(load_model(last["target"]).tokenizer))


def rule_view(index: float, last: dict | None) -> go.Figure:
    """The picture of the acceptance rule at the slider's step of the last race."""
    picked = _picked(index, last)
    if picked is None:
        return rule_charts.rule_figure(None, None)
    i, steps = picked
    return rule_charts.rule_figure(steps[i], views.TokenText(load_model(last["target"]).tokenizer))


def step_slider(last: dict | None) -> gr.Slider:
    """The slider over the last race's speculative steps, saying how many target passes went without a draft."""
    race = last["race"] if last else None
    total = len(race.spec_steps) if race else 0
    plain = len(race.spec.steps) - total if race else 0
    info = (
        f"{total} speculative steps of {total + plain} target passes; {plain} had no draft (the prompt's, "
        "and plain steps where adaptive k chose k = 0 or the drafter had nothing to offer)"
        if race
        else None
    )
    return gr.Slider(minimum=1, maximum=max(total, 2), value=1, step=1, interactive=total > 1, info=info)
