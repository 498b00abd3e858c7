"""Measurements kept per machine: a median wall time, a result cached on disk under this machine's key
(machine.py: CPU model, ISA flags, threads, library versions), and whether other work keeps the CPU busy
right now (a busy machine's timings are kept only until a quiet start measures them again).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from .machine import this_machine
from .sources import cache_dir

log = logging.getLogger(__name__)


def median_seconds(run: Callable[[], object], repeats: int = 5) -> float:
    """Median wall time of run() after one untimed call (first calls pay one-time set-up)."""
    run()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def tuning_dir() -> Path:
    return Path(os.environ.get("SPECDEC_TUNING_DIR", cache_dir() / "tuning"))


def cached(name: str, identity: dict, measure: Callable[[], dict]) -> tuple[dict, bool]:
    """measure()'s result, from disk when this machine measured the same thing before; (result, from_disk).

    Other work on the CPU while measuring skews every timing, so a result measured while the machine
    was busy is kept only until a start on a quiet machine measures it again."""
    machine = this_machine()
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:12]
    path = tuning_dir() / f"{name}-{machine.key}-{digest}.json"
    try:
        saved = json.loads(path.read_text())
    except (OSError, ValueError):
        saved = None
    if not isinstance(saved, dict) or "result" not in saved:
        saved = None  # none yet, or a file that is not a tuning record (files are replaced whole, never cut short)
    if saved is not None and not saved.get("busy"):
        return saved["result"], True
    busy_now = _busy()  # only asked where it decides something: it takes a fifth of a second
    if saved is not None and busy_now:
        return saved["result"], True
    result = measure()
    if busy_now:
        log.warning("%s measured while other work kept the CPU busy: used, and measured again on a quiet start", name)
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_suffix(f".{os.getpid()}.tmp")
    staging.write_text(
        json.dumps({"machine": machine.as_dict(), "identity": identity, "busy": busy_now, "result": result}, indent=1)
    )
    staging.replace(path)  # atomic: two processes measuring at once both leave a whole file
    return result, False


def _busy() -> bool:
    """Whether other work keeps the CPU busy just before a measurement: other processes (and, on a VM,
    its neighbours' steal) using more than half a core, or a quarter of the cores on a larger machine.
    This process's own work is left out: the 1-minute load average counted it, so the measurement
    right after a long one (the head's after the target's) always read as busy."""
    return other_cores_busy() > max(0.5, 0.25 * (os.cpu_count() or 1))


def other_cores_busy(window: float = 0.2) -> float:
    """Cores' worth of CPU time that processes other than this one used over `window` seconds."""
    own, system = psutil.Process(), psutil.cpu_times()
    own_before, started = sum(own.cpu_times()[:2]), time.perf_counter()
    time.sleep(window)
    after = psutil.cpu_times()
    busy = sum(getattr(after, f) - getattr(system, f) for f in _BUSY_FIELDS if hasattr(after, f))
    return max(0.0, busy - (sum(own.cpu_times()[:2]) - own_before)) / (time.perf_counter() - started)


_BUSY_FIELDS = ("user", "nice", "system", "irq", "softirq", "steal")  # psutil.cpu_times(): all but idle and iowait
