"""The served target's two paths in one bench process: the lean pass and the compiled passes (specdec_core/
compiled_pass.py), switched between runs so that both are timed in the same repeats (paired), each with its own
cost curve for the drafters that size drafts by it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from specdec_core.compile_jobs import bring_into_use, served_plan
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


def served_paths(target: LoadedModel) -> ServedPaths:
    """Both paths where the compiled passes are built here (for the hybrid's feature layers), else the lean one
    with a note of the command that builds them."""
    model, source = target.model, target.source
    lean = tuning_of(source, next(model.parameters()).dtype).curve
    plan = served_plan(model, make_drafter(DRAFT_HYBRID, target).feature_layers)
    if plan.missing():
        print(f"compiled passes not built here (widths {plan.missing()}): python3 -m specdec_core.compile_jobs")
        return ServedPaths(target, {LEAN: lean}, None)
    compiled = bring_into_use(model, source, plan, only_where_faster=False)  # both paths timed at every width
    paths = ServedPaths(target, {LEAN: lean, COMPILED: compiled}, compiled_passes(model))
    paths.use(LEAN)
    return paths
