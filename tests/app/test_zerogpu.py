"""ZeroGPU: the generation handlers go through spaces.GPU there, and are left alone everywhere else."""

import importlib.machinery
import sys
import types
from collections.abc import Callable, Iterator

from app import race_handlers
from app.limits import RUN_SECONDS
from app.zerogpu import GPU_SECONDS, gpu_handler


def count_to(n: int) -> Iterator[int]:
    """A streaming handler like the real ones: a generator."""
    yield from range(1, n + 1)


def stand_in_spaces(wrapped: list[tuple[Callable, int]]) -> types.ModuleType:
    """A `spaces` package as on ZeroGPU: GPU(duration=...) wraps the function, and each wrapping is recorded."""

    def gpu(duration: int) -> Callable[[Callable], Callable]:
        def decorate(function: Callable) -> Callable:
            wrapped.append((function, duration))

            def on_gpu(*args, **kwargs):
                return function(*args, **kwargs)

            return on_gpu

        return decorate

    module = types.ModuleType("spaces")
    module.__spec__ = importlib.machinery.ModuleSpec("spaces", loader=None)  # what find_spec reads for a loaded module
    module.GPU = gpu
    return module


def test_handlers_go_through_spaces_gpu_on_zerogpu(monkeypatch):
    wrapped: list[tuple[Callable, int]] = []
    monkeypatch.setitem(sys.modules, "spaces", stand_in_spaces(wrapped))

    race = gpu_handler(race_handlers.run_race)
    counting = gpu_handler(count_to)

    assert race is not race_handlers.run_race and counting is not count_to
    assert wrapped == [(race_handlers.run_race, GPU_SECONDS), (count_to, GPU_SECONDS)]
    assert list(counting(3)) == [1, 2, 3]  # the wrapped handler still streams the handler's values


def test_the_gpu_is_held_long_enough_for_both_decoders_of_a_race():
    assert GPU_SECONDS > 2 * RUN_SECONDS  # a race runs two decoders of up to RUN_SECONDS each


def test_handlers_are_left_alone_without_the_spaces_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "spaces", None)  # import fails and find_spec says None: not installed

    assert gpu_handler(race_handlers.run_race) is race_handlers.run_race


def test_handlers_are_left_alone_off_zerogpu(monkeypatch):
    monkeypatch.delenv("SPACES_ZERO_GPU", raising=False)
    import spaces  # noqa: F401  (installed for the tests, as on a Space)

    assert gpu_handler(race_handlers.run_race) is race_handlers.run_race


# On ZeroGPU itself `spaces` patches torch's CUDA internals when imported, which a CPU build of
# torch lacks: the stand-in above takes its place. tests/app/test_space.py starts and races the app
# with `spaces` installed and imported, as on any other Space hardware.
