"""ZeroGPU, Spaces' shared-GPU hardware: a function gets a GPU only while it runs inside spaces.GPU.

The `spaces` package decides for itself: off ZeroGPU (SPACES_ZERO_GPU unset) its decorator returns
the function unchanged, so wrapping wherever the package is installed is right everywhere.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable

from .limits import RUN_SECONDS

# A race runs two decoders of up to RUN_SECONDS each; a workload check stops at its prompt limit.
GPU_SECONDS = int(2 * RUN_SECONDS + 30)


def gpu_handler(handler: Callable) -> Callable:
    """The handler under spaces.GPU where the spaces package is installed, else the handler itself."""
    if importlib.util.find_spec("spaces") is None:
        return handler
    import spaces  # noqa: PLC0415  (optional dependency: only on Spaces)

    return spaces.GPU(duration=GPU_SECONDS)(handler)
