"""The served target's two paths in one bench process: the lean pass and the compiled passes (specdec_core/
compiled_pass.py), switched between runs so that both are timed in the same repeats (paired), each with its own
cost curve for the drafters that size drafts by it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from specdec_core.compile_jobs import NotFaster, bring_into_use, compile_mode, served_plan
from specdec_core.compiled_pass import CompiledPasses, attach, compiled_passes, detach
from specdec_core.costs import CostCurve
from specdec_core.drafters import DRAFT_HYBRID, make_drafter
from specdec_core.models import LoadedModel
from specdec_core.tuning import tuning_of, use_pass

LEAN, COMPILED = "lean", "compiled"
PATHS = (LEAN, COMPILED)


@dataclass(frozen=True)
class ServedPaths:
    target: LoadedModel
    curves: dict[str, CostCurve]
    passes: CompiledPasses | None  # None: not built on this machine

    @property
    def available(self) -> tuple[str, ...]:
        return PATHS if self.passes else (LEAN,)

    def use(self, path: str) -> None:
        """Runs started from now on take this path and read its costs."""
        model, source = self.target.model, self.target.source
        if path == COMPILED:
            attach(model, self.passes)
        else:
            detach(model)
        use_pass(model, source, path, self.curves[path])

    def on(self, path: str, run: Callable) -> Callable:
        """run, on path."""

        def on_path():
            self.use(path)
            return run()

        return on_path


def served_paths(target: LoadedModel, every_width: bool = False) -> ServedPaths:
    """Both paths where the compiled passes are built here (for the hybrid's feature layers), else the lean one
    with a note of the command that builds them (or of SPECDEC_COMPILE=off, as in the tests). The compiled path as
    the app serves it (the compiled passes at the widths where they measure faster, the lean pass elsewhere), or
    with every_width the compiled passes wherever a package holds the width (the passes' own costs)."""
    model, source = target.model, target.source
    lean = tuning_of(source, next(model.parameters()).dtype).curve
    if compile_mode() == "off":
        print("compiled passes off (SPECDEC_COMPILE=off): the lean pass alone")
        return ServedPaths(target, {LEAN: lean}, None)
    plan = served_plan(model, source, make_drafter(DRAFT_HYBRID, target).feature_layers)
    if plan.missing():
        print(f"compiled passes not built here (widths {plan.missing()}): python3 -m specdec_core.compile_jobs")
        return ServedPaths(target, {LEAN: lean}, None)
    try:
        compiled = bring_into_use(model, source, plan, only_where_faster=not every_width)
    except NotFaster as error:
        print(f"{error}: the served path is the lean pass")
        return ServedPaths(target, {LEAN: lean}, None)
    paths = ServedPaths(target, {LEAN: lean, COMPILED: compiled}, compiled_passes(model))
    paths.use(LEAN)
    return paths
