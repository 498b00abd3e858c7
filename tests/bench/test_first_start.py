"""The app's start to its first race, measured end to end: app.py in a new process, its page, the default race."""

import json
import subprocess
import sys

import pytest

from app.presets import PRESETS

pytestmark = pytest.mark.slow


def test_first_start_times_the_page_and_the_first_race_of_a_started_app(tmp_path, embedded):
    # --warm: this run's caches (the converted model, the tuning); a start without them is minutes, for the bench
    command = [sys.executable, "-m", "bench", "--first-start", "--warm", "--tokens", "8", "--out", str(tmp_path)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(next(tmp_path.glob("first-start-*.json")).read_text())
    assert report["caches"] == "this machine's" and 0 < report["page_s"] < report["first_race_s"]
    assert report["identical"] is True and 1 <= report["race"]["tokens"] <= 8
    assert report["race"]["drafter"] == PRESETS[0].drafts[0]
    assert f"first race finished after {report['first_race_s']} s" in result.stdout
