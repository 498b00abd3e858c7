"""Measurements kept per machine: the disk cache and the busy check."""

import os
import subprocess
import sys
import threading
import time

from specdec_core import measurements


def test_busy_counts_other_processes_not_this_ones_own_work():
    """The load average counted this process's own measurements as other work; the busy check must not.
    Relative to a baseline read just before, so that a machine busy with something else still tests it."""
    baseline = measurements.other_cores_busy()
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            pass

    spinner = threading.Thread(target=spin)
    spinner.start()
    try:
        own = measurements.other_cores_busy()
    finally:
        stop.set()
        spinner.join()
    child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        other = measurements.other_cores_busy()
    finally:
        child.kill()
        child.wait()
    assert own < baseline + 0.35, (baseline, own)
    assert other > min(baseline + 0.6, os.cpu_count() - 0.5), (baseline, other)  # unless the cores were full already


def test_a_measurement_taken_on_a_busy_machine_is_measured_again_once_it_is_quiet(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_TUNING_DIR", str(tmp_path))
    runs = []

    def measure():
        runs.append(1)
        return {"seconds": len(runs)}

    monkeypatch.setattr(measurements, "_busy", lambda: True)
    assert measurements.cached("part", {"id": 2}, measure) == ({"seconds": 1}, False)
    # still busy: the busy result serves
    assert measurements.cached("part", {"id": 2}, measure) == ({"seconds": 1}, True)
    monkeypatch.setattr(measurements, "_busy", lambda: False)
    assert measurements.cached("part", {"id": 2}, measure) == ({"seconds": 2}, False)  # quiet: measured again, and kept
    assert measurements.cached("part", {"id": 2}, measure) == ({"seconds": 2}, True)
