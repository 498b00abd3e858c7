"""`python app.py` starts with no network: no analytics, no font downloads, nothing but loopback."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import die_with_the_test_run, loopback_port

ROOT = Path(__file__).resolve().parents[2]
# Runs app.py as __main__ with every name lookup and outgoing connection recorded (non-loopback ones refused).
LAUNCHER = """
import json, runpy, socket, sys
log = open(sys.argv[1], "a")
original = socket.socket.connect
def connect(self, address):
    host = address[0] if isinstance(address, tuple) else str(address)
    log.write(json.dumps(host) + "\\n"); log.flush()
    if host not in ("127.0.0.1", "::1", "localhost"):
        raise OSError("network disabled by the offline-start test")
    return original(self, address)
socket.socket.connect = connect
original_lookup = socket.getaddrinfo
def getaddrinfo(host, *args, **kwargs):
    log.write(json.dumps(str(host)) + "\\n"); log.flush()
    return original_lookup(host, *args, **kwargs)
socket.getaddrinfo = getaddrinfo
runpy.run_path("app.py", run_name="__main__")
"""


@pytest.mark.slow
def test_app_starts_offline_and_serves_the_page(tmp_path):
    port = loopback_port()
    log = tmp_path / "connections.jsonl"
    env = {**os.environ, "GRADIO_SERVER_PORT": str(port), "GRADIO_SERVER_NAME": "127.0.0.1"}
    env.pop("GRADIO_ANALYTICS_ENABLED", None)  # app.py itself must turn analytics off
    process = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, str(log)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=die_with_the_test_run,
    )
    try:
        page = None
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and process.poll() is None:
            try:
                page = httpx.get(f"http://127.0.0.1:{port}/", timeout=2)
                break
            except httpx.HTTPError:
                time.sleep(0.5)
        if page is None:
            process.kill()
            pytest.fail("app.py did not serve its page:\n" + process.communicate()[0][-3000:])
        assert page.status_code == 200
        assert "fonts.googleapis.com" not in page.text
        config = httpx.get(f"http://127.0.0.1:{port}/config", timeout=5).json()
        assert any(d.get("api_name") == "race" for d in config["dependencies"])
        time.sleep(3)  # analytics, if on, would fire around start-up
        hosts = {json.loads(line) for line in log.read_text().splitlines()} if log.exists() else set()
        assert hosts <= {"127.0.0.1", "::1", "localhost", "None"}, f"tried to reach {hosts}"
    finally:
        process.terminate()
        process.wait(timeout=20)
