"""ZeroGPU: the generation handlers go through spaces.GPU there, and are left alone everywhere else."""

from app import handlers
from app.zerogpu import gpu_handler


def test_handlers_are_left_alone_off_zerogpu():
    import spaces  # noqa: F401  (installed for the tests, as on a Space)

    assert gpu_handler(handlers.run_race) is handlers.run_race


# On ZeroGPU itself `spaces` patches torch's CUDA internals when imported, which a CPU build of
# torch lacks: that case cannot run here. tests/app/test_space.py starts and races the app with
# `spaces` installed and imported, as on any other Space hardware.
