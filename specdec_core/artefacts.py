"""Files built once per machine and kept on disk (compiled passes), checked before each use and built again when
bad or foreign.

A compiled pass is machine code for one CPU's instruction set, one torch and one set of shapes: a file copied from
another machine, left by another library version, or cut short by a build that was stopped would load wrongly or
crash. So each artefact has a manifest beside it, written after the file: the machine it was built on
(machine.py's key: CPU model, ISA, threads, library versions), what it was built from (the caller's identity:
the model, the shapes), its size and its SHA-256. The file is used only when all of them match this machine and
this request; otherwise it is built again and replaces the old one.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .machine import this_machine
from .sources import cache_dir

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Artefact:
    path: Path
    note: str  # "read from the cache", or why it was built now


def artefact_dir() -> Path:
    return cache_dir() / "compiled"


def cached_artefact(name: str, identity: dict, build: Callable[[Path], None], suffix: str = ".pt2") -> Artefact:
    """The artefact `name` built from `identity` on this machine: the cached file where its manifest vouches for
    it, else build(path) writes a new one (to a staging path, renamed into place when whole)."""
    path = artefact_path(name, identity, suffix)
    problem = artefact_problem(path, identity)
    if problem is None:
        return Artefact(path, "read from the cache")
    log.info("building %s: %s", path.name, problem)
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(f".{path.stem}.{os.getpid()}{path.suffix}")  # the suffix kept: builders check it
    build(staging)
    manifest = {
        "machine": this_machine().as_dict(),
        "machine_key": this_machine().key,
        "identity": identity,
        "bytes": staging.stat().st_size,
        "sha256": _sha256(staging),
    }
    _manifest_path(path).unlink(missing_ok=True)  # no manifest vouches for a file while it is being replaced
    staging.replace(path)
    manifest_staging = _manifest_path(staging)
    manifest_staging.write_text(json.dumps(manifest, indent=1))
    manifest_staging.replace(_manifest_path(path))
    return Artefact(path, f"built now ({problem})")


def artefact_path(name: str, identity: dict, suffix: str = ".pt2") -> Path:
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:12]
    return artefact_dir() / f"{name}-{this_machine().key}-{digest}{suffix}"


def artefact_problem(path: Path, identity: dict) -> str | None:
    """Why the file at path cannot be used on this machine for identity; None where it can."""
    try:
        manifest = json.loads(_manifest_path(path).read_text())
    except (OSError, ValueError):
        return "none built yet" if not path.exists() else "no manifest vouches for it"
    if not path.is_file():
        return "none built yet"
    if not isinstance(manifest, dict) or manifest.get("machine_key") != this_machine().key:
        return "built on another machine or with other library versions"
    if manifest.get("identity") != json.loads(json.dumps(identity, default=str)):
        return "built from another model or shape"
    if path.stat().st_size != manifest.get("bytes"):
        return "cut short or grown since it was built"
    if _sha256(path) != manifest.get("sha256"):
        return "its bytes changed since it was built"
    return None


def _manifest_path(path: Path) -> Path:
    return path.with_name(path.name + ".json")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while chunk := file.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()
