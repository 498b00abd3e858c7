"""Where a model comes from, how big it is before it is loaded, and what a public demo allows.

A source string is the embedded id, a hub id, a local folder or a .gguf file. Sizes are read
from metadata only (safetensors and GGUF headers, the hub's safetensors metadata), so a model
that cannot fit is refused before a byte of it is downloaded or loaded.

Public mode (on a Space, where SPACE_ID is set, or with SPECDEC_PUBLIC=1): local folders and
.gguf paths are refused, hub ids above a parameter bound are refused, and no message names a
server path or repeats a library's message about one.
"""

from __future__ import annotations

import json
import os
import re
import socket
from pathlib import Path
from urllib.parse import urlparse

import psutil
import torch

from .errors import ModelLoadError

EMBEDDED_ID = "embedded:SmolLM2-135M-Instruct"
EMBEDDED_PARAMETERS = 134_515_008  # SmolLM2-135M, counted from its converted weights
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.\-]{0,95}/[\w.\-]{1,96}$")
# Loaded RSS over weight bytes, measured for the embedded model with the packed linears (dense
# copies released; the tied embedding is kept both ways). Used to size any model before loading.
MEMORY_FACTOR = 1.3
RESERVE_BYTES = 768 * 2**20  # left for the app, the tokenizer, activations and KV caches


def cache_dir() -> Path:
    """Where converted models, measured costs and generated training data live (never in the repository)."""
    return Path(os.environ.get("SPECDEC_CACHE_DIR", Path.home() / ".cache" / "specdec"))


def public_mode() -> bool:
    return bool(os.environ.get("SPACE_ID")) or os.environ.get("SPECDEC_PUBLIC", "").lower() in ("1", "true", "yes")


def public_parameter_bound() -> int:
    """The largest hub model a public demo loads: 2B on CPU hardware, 8B with a GPU (SPECDEC_MAX_PARAMS overrides)."""
    if os.environ.get("SPECDEC_MAX_PARAMS"):
        return int(float(os.environ["SPECDEC_MAX_PARAMS"]))
    return 8_000_000_000 if torch.cuda.is_available() else 2_000_000_000


PUBLIC_RULE = (
    "This public demo loads only the presets and hub model ids (up to {bound}); local files and folders are "
    "turned off here. Run the app on your own machine to use them."
)


def classify(source: str) -> str:
    """The kind of a source: "embedded", "gguf", "folder" or "hub"; raises for anything else (and for local paths
    in public mode)."""
    if source == EMBEDDED_ID:
        return "embedded"
    looks_local = source.endswith(".gguf") or source.startswith(("/", ".", "~")) or os.sep in source.replace("/", "", 1)
    if public_mode() and (looks_local or not _HUB_ID.match(source)):
        raise ModelLoadError(PUBLIC_RULE.format(bound=_count(public_parameter_bound())))
    path = Path(source).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise ModelLoadError(f"No GGUF file at {source}.")
        return "gguf"
    if path.is_dir():
        return "folder"
    if not _HUB_ID.match(source):
        raise ModelLoadError(
            f"'{source}' is neither a hub id (like HuggingFaceTB/SmolLM2-360M-Instruct), a folder, nor a .gguf file."
        )
    return "hub"


def parameter_count(source: str, kind: str) -> int | None:
    """Parameters of a model from its metadata alone; None where none could be read."""
    if kind == "embedded":
        return EMBEDDED_PARAMETERS
    if kind == "gguf":
        return _gguf_parameters(Path(source).expanduser())
    if kind == "folder":
        return _safetensors_parameters(sorted(Path(source).expanduser().glob("*.safetensors")))
    return hub_parameters(source)


def hub_parameters(repo_id: str) -> int | None:
    """From the local hub cache if the model is there, else from the hub's safetensors metadata."""
    from huggingface_hub import scan_cache_dir  # noqa: PLC0415  (slow import, only needed here)
    from huggingface_hub.errors import CacheNotFound  # noqa: PLC0415

    try:
        for repo in scan_cache_dir().repos:
            if repo.repo_id == repo_id and repo.repo_type == "model":
                for revision in sorted(repo.revisions, key=lambda r: r.last_modified, reverse=True):
                    files = sorted(f.file_path for f in revision.files if f.file_name.endswith(".safetensors"))
                    if files:
                        return _safetensors_parameters(files)
    except CacheNotFound:
        pass
    if not hub_reachable():
        return None
    from huggingface_hub import get_safetensors_metadata  # noqa: PLC0415

    try:
        return int(sum(get_safetensors_metadata(repo_id).parameter_count.values()))
    except Exception:  # noqa: BLE001  (no safetensors on the hub, a private repo, a timeout: size unknown)
        return None


def _safetensors_parameters(files: list[Path]) -> int | None:
    if not files:
        return None
    total = 0
    for file in files:
        with open(file, "rb") as f:  # the header: 8 bytes of length, then JSON with every tensor's shape
            length = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(length))
        for name, info in header.items():
            if name != "__metadata__":
                count = 1
                for dim in info["shape"]:
                    count *= dim
                total += count
    return total


def _gguf_parameters(path: Path) -> int | None:
    try:
        from gguf import GGUFReader  # noqa: PLC0415

        return int(sum(int(t.n_elements) for t in GGUFReader(str(path)).tensors))
    except Exception:  # noqa: BLE001  (not a GGUF file: from_pretrained says so when it is tried)
        return None


def loaded_bytes(parameters: int, dtype: torch.dtype) -> int:
    """Resident memory of a model once loaded and packed, from its parameter count."""
    return int(parameters * torch.finfo(dtype).bits // 8 * MEMORY_FACTOR)


def memory_budget(held_bytes: int) -> int:
    """Bytes models may take: what they hold now plus what the machine has free, less a reserve."""
    if os.environ.get("SPECDEC_MEMORY_BUDGET_GB"):
        return int(float(os.environ["SPECDEC_MEMORY_BUDGET_GB"]) * 2**30)
    return max(0, held_bytes + free_memory() - RESERVE_BYTES)


def free_memory() -> int:
    """psutil's available memory, or less where a container's cgroup limit says so (a Space's
    /proc/meminfo shows the host's memory, not the container's 16 GB)."""
    free = psutil.virtual_memory().available
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        used = int(Path("/sys/fs/cgroup/memory.current").read_text())
        if limit != "max":
            free = min(free, int(limit) - used)
    except (OSError, ValueError):
        pass  # no cgroup v2 limit to read
    return free


def _count(parameters: int) -> str:
    return f"{parameters / 1e9:.1f}B parameters" if parameters >= 1e9 else f"{parameters / 1e6:.0f}M parameters"


def gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


def check_public_size(source: str, parameters: int | None) -> None:
    if not public_mode():
        return
    bound = public_parameter_bound()
    if parameters is None:
        raise ModelLoadError(
            f"'{source}': its size could not be read from the hub, so this public demo does not load it."
        )
    if parameters > bound:
        raise ModelLoadError(
            f"'{source}' has {_count(parameters)}; this public demo loads models up to {_count(bound)}. "
            "Pick a smaller model."
        )


def hub_reachable(timeout: float = 3.0) -> bool:
    """A quick TCP check, because transformers retries an unreachable hub for ~30 s before failing."""
    if os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes"):
        return False
    host = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co")).hostname or "huggingface.co"
    try:
        with socket.create_connection((host, 443), timeout=timeout):
            return True
    except OSError:
        return False


def safe_message(source: str, error: Exception) -> str:
    """A load failure as a message: the library's own words locally, never in public mode (they name paths)."""
    if public_mode():
        return f"Could not load '{source}' ({type(error).__name__}). Check the id, or pick a preset."
    return f"Could not load '{source}': {error}"
