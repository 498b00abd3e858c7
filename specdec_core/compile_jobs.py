"""Compiling a served target's passes without blocking anyone (compiled_pass.py).

A separate process at the lowest CPU priority builds the packages that are missing (minutes per width) while the
serving process runs the lean pass; when every width is built, the serving process loads them, times each against
the lean pass width by width and attaches them for the widths where they are faster (compiled_pass.attach), so that
runs started from then on take them and size their drafts by the costs of what runs (tuning.use_pass). Built
packages stay on disk: a later start loads them in seconds.

Ahead of time, with nothing else running (the README names it):

    python3 -m specdec_core.compile_jobs [--source embedded:SmolLM2-135M-Instruct] [--layers N,...]

(--layers: the target layers whose outputs the packages give beside the logits; by default those the app's default
drafter reads, the trained head's last layer for the embedded model.)

SPECDEC_COMPILE=off turns compiling off (the tests do, except where they test it); =load uses packages already
built but builds none.
"""

from __future__ import annotations

import argparse
import ctypes
import fcntl
import json
import logging
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, replace

import torch
from transformers import PreTrainedModel

from .artefacts import artefact_dir
from .compiled_pass import (
    LENGTH,
    CompiledPasses,
    PassPlan,
    attach,
    build_packages,
    compiled_passes,
    kv_buffers,
    load_packages,
    model_fingerprint,
)
from .costs import CONTEXT_TOKENS, LONG_CONTEXT_TOKENS, LONGEST_VERIFICATION, CostCurve, non_decreasing
from .drafters.eagle_head import CONFIG_NAME, HeadConfig
from .drafters.factory import DRAFT_HYBRID
from .drafters.head_variants import HEADS_DIR
from .lean_pass import is_lean
from .measurements import cached
from .models import load_stock
from .pass_clock import PassClock
from .sources import EMBEDDED_ID, cache_dir, classify, parameter_count
from .tuning import cost_curve, use_pass

log = logging.getLogger(__name__)

MODES = ("background", "load", "off")
# Compiled only where it pays: each width's package holds the model's weights packed, and compiling takes minutes
# per width for a 135M model on two cores, about proportionally more for larger ones.
MAX_PARAMETERS = 400_000_000
REPEATS = 9
BUILD_COMMAND = "python3 -m specdec_core.compile_jobs"
assert LONG_CONTEXT_TOKENS >= LENGTH  # what the long cost curve assumes (bring_into_use)
# A compiled width is used where it is this much faster than the lean pass, timed alone: a few percent there were
# lost in the app's races (bench/RESULTS.md, 2026-12-08, AMD EPYC (AVX-512)), and noise never decides.
FASTER_BY = 1.10


def compile_mode() -> str:
    mode = os.environ.get("SPECDEC_COMPILE", "background")
    return mode if mode in MODES else "off"


@dataclass(frozen=True, slots=True)
class CompileState:
    """Where compiling a target's passes stands, for the Explainer."""

    state: str  # "compiling", "in use", "not used" (not faster here), "failed", "off", "not compiled"
    detail: str = ""


_states: dict[str, CompileState] = {}
_plans: dict[str, PassPlan] = {}  # what was brought into use, by source: a reloaded model takes it again
_lock = threading.Lock()


def compile_state(source: str) -> CompileState:
    return _states.get(source, CompileState("not compiled", "no compiled pass has been asked for this model"))


def not_compilable(model: PreTrainedModel, source: str) -> str | None:
    """Why the model's passes are not compiled here, or None."""
    if compile_mode() == "off":
        return "compiling is off (SPECDEC_COMPILE=off)"
    if not is_lean(model) or next(model.parameters()).dtype != torch.float32:
        return "only a float32 Llama-family target on a CPU (the lean pass's models) is compiled"
    if getattr(model.config, "attention_bias", False) or getattr(model.config, "mlp_bias", False):
        return "a model whose linears have biases is not compiled (the static pass has none)"
    parameters = parameter_count(source, classify(source))
    if parameters is None or parameters > MAX_PARAMETERS:
        return f"only models up to {MAX_PARAMETERS / 1e6:.0f}M parameters are compiled (a package per width)"
    return None


def compile_in_background(model: PreTrainedModel, source: str, feature_layers: tuple[int, ...] = ()) -> None:
    """Starts bringing the model's compiled passes into use (once per source): loads them where built, else builds
    them in a low-priority process first. Returns at once."""
    with _lock:
        if source in _states:
            return
        reason = not_compilable(model, source)
        if reason:
            _states[source] = CompileState("off", reason)
            return
        plan = served_plan(model, source, feature_layers)
        _states[source] = CompileState("compiling", "checking the packages built on this machine")
    threading.Thread(target=_bring_into_use, args=(model, source, plan), daemon=True, name="compile").start()


def keep_in_use(model: PreTrainedModel, source: str) -> threading.Thread | None:
    """Brings the compiled passes in use for source into use again for model, a copy loaded anew (the model cache
    let the one they were attached to go), in a thread it returns; None where there is nothing to do."""
    with _lock:
        if compile_state(source).state != "in use" or compiled_passes(model) is not None:
            return None
        _states[source] = CompileState("compiling", "loading the packages again for the model loaded again")
    thread = threading.Thread(target=_bring_into_use, args=(model, source, _plans[source]), daemon=True)
    thread.start()
    return thread


def layer_numbers(model: PreTrainedModel, layers) -> tuple[int, ...]:
    """Layer numbers from 0, ascending (-1: the last)."""
    return tuple(sorted({i % model.config.num_hidden_layers for i in layers}))


class NotFaster(RuntimeError):
    """The compiled passes measured not faster than the lean pass at every width they hold on this machine."""


def _bring_into_use(model: PreTrainedModel, source: str, plan: PassPlan) -> None:
    started = time.perf_counter()
    try:
        missing = plan.missing()
        if missing and compile_mode() == "load":
            _states[source] = CompileState("not compiled", "SPECDEC_COMPILE=load builds none: " + BUILD_COMMAND)
            return
        if missing:
            widths = ", ".join(map(str, missing))
            _states[source] = CompileState("compiling", f"the {widths}-token passes, in a background process")
            _build_in_process_below(source, plan)
        _states[source] = CompileState("compiling", "loading the packages and timing them against the lean pass")
        curve = bring_into_use(model, source, plan)
        _plans[source] = plan
        used = sorted(compiled_passes(model).used_for)
        _states[source] = CompileState(
            "in use",
            f"for passes of {used[0]}-{used[-1]} tokens (measured faster than the lean pass here at each), "
            f"{time.perf_counter() - started:.0f} s after they were asked for; {curve.describe()}",
        )
    except NotFaster as error:
        _states[source] = CompileState("not used", f"{error}: the lean pass runs")
    except Exception as error:  # noqa: BLE001  (the lean pass goes on serving; the Explainer says why)
        log.warning("compiled passes for %s not used: %s", source, error)
        _states[source] = CompileState("failed", f"the lean pass runs: {error}")


def bring_into_use(model: PreTrainedModel, source: str, plan: PassPlan, only_where_faster: bool = True) -> CostCurve:
    """Times the plan's packages against the lean pass, width by width (or reads those timings); where they are
    faster at every width they hold (or, only_where_faster False, the bench's comparison, regardless), loads them,
    attaches them to model and records the costs of the pass each width then takes as its tuning's; returns that
    curve. Raises where a package needed is not built, and NotFaster where they are not faster at every width."""
    lean, compiled = paired_timings(model, plan)
    widths = range(1, len(lean) + 1)
    held = [n for n in widths if plan.bucket(n) is not None]  # wider passes run the lean pass
    faster = frozenset(n for n in held if not only_where_faster or compiled[plan.bucket(n)] * FASTER_BY < lean[n - 1])
    if faster != frozenset(held):
        # All or nothing: with only some widths compiled, plain decoding gets faster while the verification it is
        # weighed against does not, and adaptive k lost up to 12% against it (bench/RESULTS.md, 2026-12-08,
        # AVX2 path). The bench times such a mix with only_where_faster False.
        at = ", ".join(map(str, sorted(faster))) or "no width"
        raise NotFaster(
            f"measured here, the compiled passes are {FASTER_BY - 1:.0%} faster than the lean pass at {at}, not at "
            f"every width up to {max(held)}"
        )
    # only the packages in use are loaded: each holds the weights
    passes = _loaded(replace(plan, widths=tuple(sorted({plan.bucket(n) for n in faster}))))
    taken = [compiled[plan.bucket(n)] if n in faster else lean[n - 1] for n in widths]
    # Behind LONG_CONTEXT_TOKENS the static length holds no pass: the long curve stays the lean pass's.
    lean_curve = cost_curve(model)
    long = lean_curve.long_seconds if lean_curve is not None else None
    curve = CostCurve(tuple(non_decreasing(taken)), long)
    attach(model, replace(passes, used_for=faster))
    use_pass(model, source, "compiled", curve)
    return curve


def _loaded(plan: PassPlan) -> CompiledPasses:
    passes = load_packages(plan)
    if passes is None:
        raise RuntimeError(f"not every width is built (missing: {plan.missing()}); build them: {BUILD_COMMAND}")
    return passes


def served_plan(model: PreTrainedModel, source: str, feature_layers: tuple[int, ...] = ()) -> PassPlan:
    """The plan of the served model's compiled passes, with the feature layers its drafter reads."""
    return PassPlan(model_fingerprint(model), feature_layers=layer_numbers(model, feature_layers), source=source)


def _build_in_process_below(source: str, plan: PassPlan) -> None:
    """Runs this module's command at the lowest CPU priority, its output in the cache's log."""
    log_path = cache_dir() / "compiled" / "compile.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "specdec_core.compile_jobs", "--source", source, "--parent", str(os.getpid())]
    command += ["--fingerprint", plan.fingerprint, "--layers", ",".join(map(str, plan.feature_layers))]
    with log_path.open("a") as out:
        result = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT)
    if result.returncode != 0:
        raise RuntimeError(f"the compiling process failed (exit {result.returncode}; its log: {log_path})")


@torch.inference_mode()
def paired_timings(model: PreTrainedModel, plan: PassPlan) -> tuple[list[float], dict[int, float]]:
    """Seconds of a lean pass over n = 1..LONGEST_VERIFICATION tokens, and of each of the plan's packages, behind
    CONTEXT_TOKENS (fewer where the static length is shorter), timed in the same rounds so that both see the
    machine alike; cached per machine like the tuning (the packages are loaded only to time them). The compiled
    passes' cost does not grow with the context: attention reads the whole static buffer whatever it holds."""
    widest = max(plan.widths)
    behind = min(CONTEXT_TOKENS, plan.length - widest)
    identity = {**plan.identity(0), "widths": sorted(plan.widths), "behind": behind, "timing": "paired"}

    def measure() -> dict:
        passes = _loaded(plan)
        clock, kv = PassClock(model, behind, LONGEST_VERIFICATION), kv_buffers(model, plan.length)
        tokens, widths = list(range(1, 1 + widest)), range(1, LONGEST_VERIFICATION + 1)
        lean: dict[int, list[float]] = {n: [] for n in widths}
        compiled: dict[int, list[float]] = {w: [] for w in passes.packages}
        for round_ in range(REPEATS + 1):  # the first round is untimed: one-time set-up per shape
            for n in widths:
                seconds = clock.time(n)
                if round_:
                    lean[n].append(seconds)
            for width in compiled:
                begun = time.perf_counter()
                passes.run(kv, tokens[:width], behind, None, width)
                if round_:
                    compiled[width].append(time.perf_counter() - begun)
        return {
            "lean": [statistics.median(lean[n]) for n in widths],
            "compiled": {str(w): statistics.median(t) for w, t in compiled.items()},
        }

    result, _ = cached("compiled-vs-lean", identity, measure)
    return result["lean"], {int(w): s for w, s in result["compiled"].items()}


def default_layers(source: str) -> tuple[int, ...]:
    """The feature layers the app's default drafter reads from this target: the trained head's for the embedded
    model, none for others (their drafters read no features)."""
    if source != EMBEDDED_ID:
        return ()
    folder = HEADS_DIR / DRAFT_HYBRID.split(":", 1)[1]
    return HeadConfig(**json.loads((folder / CONFIG_NAME).read_text())).layers


def _below_the_app(parent: int) -> None:
    """In the compiling process the app started: the lowest CPU priority, and stopped by Linux when the app's
    thread that waits for it ends (set here, not between fork and exec, where a threaded server must not call
    into the dynamic loader); if the app has already gone, stop now."""
    os.nice(19)
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:
        raise SystemExit("the app that started this compile has stopped")


def main() -> None:
    parser = argparse.ArgumentParser(description="Compiles a target's passes for this machine (minutes per width).")
    parser.add_argument("--source", default=EMBEDDED_ID)
    parser.add_argument(
        "--layers", default=None, help="feature layers the packages output (default: those the default drafter reads)"
    )
    parser.add_argument("--fingerprint", default="", help="refuse to build unless the model has this fingerprint")
    parser.add_argument("--parent", type=int, default=0, help="the app that started this process (compile_jobs)")
    args = parser.parse_args()
    if args.parent:
        _below_the_app(args.parent)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    stock = load_stock(args.source, torch.float32)
    layers = default_layers(args.source) if args.layers is None else [int(i) for i in args.layers.split(",") if i]
    plan = served_plan(stock, args.source, tuple(layers))
    if args.fingerprint and args.fingerprint != plan.fingerprint:
        raise SystemExit(f"{args.source} is not the model asked for (fingerprint {plan.fingerprint})")
    lock_path = artefact_dir() / "build.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two apps starting on one machine: the second waits, then finds them built
        build_packages(stock, plan, report=print)
    print(f"every width built: {', '.join(map(str, plan.widths))} tokens, for {plan.length} positions", flush=True)


if __name__ == "__main__":
    main()
