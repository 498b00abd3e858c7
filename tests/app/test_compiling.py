"""The app serves while the target's passes compile (compile_jobs.py): started with no compiled passes, it races on
the lean pass while a low-priority process compiles, the race's outputs identical; the compiling process stops
with the app."""

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest
from gradio_client import Client

from specdec_core import DRAFT_NGRAM
from specdec_core.models import _embedded_converted
from tests.app.test_api import RACE_DEFAULTS
from tests.conftest import die_with_the_test_run, loopback_port

ROOT = Path(__file__).resolve().parents[2]
WAIT_SECONDS = 180  # the page, then the warm-up (load, tuning, a few tokens), then the compiling process's start


def wait_for(condition, what: str, process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline and process.poll() is None:
        if condition():
            return
        time.sleep(0.5)
    pytest.fail(f"{what} did not happen:\n" + log.read_text()[-3000:])


def compiling_children(process: subprocess.Popen) -> list[psutil.Process]:
    return [
        p for p in psutil.Process(process.pid).children(recursive=True) if "specdec_core.compile_jobs" in p.cmdline()
    ]


def page_up(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.mark.slow
def test_a_race_while_the_passes_compile_finishes_identical_and_the_compile_stops_with_the_app(tmp_path):
    cache = tmp_path / "cache"  # no compiled passes; the converted model as in the usual cache
    cache.mkdir()
    (cache / _embedded_converted().name).symlink_to(_embedded_converted())
    port, log = loopback_port(), tmp_path / "app.log"
    env = {
        **os.environ,
        "SPECDEC_COMPILE": "background",
        "SPECDEC_CACHE_DIR": str(cache),
        "GRADIO_SERVER_PORT": str(port),
        "GRADIO_SERVER_NAME": "127.0.0.1",
    }
    app = subprocess.Popen(
        [sys.executable, "app.py"],
        cwd=ROOT,
        env=env,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        preexec_fn=die_with_the_test_run,
    )
    url = f"http://127.0.0.1:{port}/"
    try:
        wait_for(lambda: page_up(url), "the page", app, log)
        wait_for(lambda: compiling_children(app), "the compiling process's start", app, log)
        prompt = "List three colours as a JSON array."
        *_, summary, details, _, _, _ = Client(url, verbose=False).predict(
            prompt=prompt, **{**RACE_DEFAULTS, "drafter": DRAFT_NGRAM}, api_name="/race"
        )
        assert details["identical"] is True and "✔ identical" in summary
        children = compiling_children(app)
        assert children, "the compile ended before the race did: the race did not run while it compiled"
    finally:
        app.terminate()
        app.wait(timeout=30)
    _, alive = psutil.wait_procs(children, timeout=15)
    assert not alive, "the compiling process outlived the app"
