"""Loading: clear refusals for what cannot be loaded, and the vocabulary check between draft and target."""

import json
import time

import pytest

from specdec_core import LoadedModel, ModelLoadError, VocabularyMismatchError, check_same_vocabulary, load_model
from specdec_core.cpu_kernels import resident_bytes
from tests.conftest import word_tokenizer


def test_draft_with_another_tokenizer_is_refused(target_model, draft_model):
    target = LoadedModel(target_model, word_tokenizer(["a", "b", "c"]), "target")
    same = LoadedModel(draft_model, word_tokenizer(["a", "b", "c"]), "same-draft")
    other = LoadedModel(draft_model, word_tokenizer(["x", "y", "z"]), "other-draft")
    check_same_vocabulary(target, same)
    with pytest.raises(VocabularyMismatchError, match="uses another tokenizer"):
        check_same_vocabulary(target, other)


def test_unknown_hub_id_fails_fast_offline():
    started = time.perf_counter()
    with pytest.raises(ModelLoadError, match="cannot be reached"):
        load_model("no-such-org/no-such-model-xyz")
    assert time.perf_counter() - started < 15  # no 30 s of retries


@pytest.mark.parametrize(
    "source, message", [("!!!", "neither a hub id"), ("", "No model given"), ("/nope/x.gguf", "No GGUF file")]
)
def test_malformed_sources_are_refused(source, message):
    with pytest.raises(ModelLoadError, match=message):
        load_model(source)


def test_model_that_needs_remote_code_is_refused(tmp_path):
    config = {
        "model_type": "totally_custom_llm",
        "auto_map": {"AutoConfig": "conf.Custom", "AutoModelForCausalLM": "mod.Custom"},
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match="trust_remote_code"):
        load_model(str(tmp_path))


def _tiny_folders(tmp_path, count: int) -> list[str]:
    from tests.conftest import tiny_llama

    tokenizer = word_tokenizer(["a", "b"])
    folders = []
    for i in range(count):
        folder = tmp_path / f"m{i}"
        tiny_llama(seed=i).save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        folders.append(str(folder))
    return folders


def test_model_cache_is_bounded_by_bytes_and_evicts_the_least_recently_used(tmp_path, monkeypatch):
    from specdec_core import models
    from specdec_core.sources import loaded_bytes, parameter_count

    folders = _tiny_folders(tmp_path, 3)
    estimate = loaded_bytes(parameter_count(folders[0], "folder"), models.default_dtype())
    models.MODELS.clear()
    size = max(estimate, resident_bytes(load_model(folders[0]).model))  # with its kernel plan's packed copies
    assert models.MODELS.held_bytes == size  # counted as it is once loaded, where that is more than estimated
    models.MODELS.clear()
    monkeypatch.setenv("SPECDEC_MEMORY_BUDGET_GB", str(2.5 * size / 2**30))  # room for two
    first = load_model(folders[0])
    assert load_model(folders[0]) is first  # a second run does not reload
    load_model(folders[1])
    load_model(folders[2])
    assert [k[1] for k in models.MODELS.keys()] == folders[1:]
    assert models.MODELS.held_bytes <= 2.5 * size
    assert load_model(folders[0]) is not first  # evicted, then loaded anew
    models.MODELS.clear()


def test_the_model_cache_counts_what_a_value_holds_once_loaded_and_evicts_for_it(monkeypatch):
    from specdec_core.models import _ModelCache

    monkeypatch.setenv("SPECDEC_MEMORY_BUDGET_GB", str(250 / 2**30))  # 250 bytes
    cache = _ModelCache()
    cache.get("a", "a", 100, lambda: "A")
    assert cache.get("b", "b", 100, lambda: "B", resident=lambda value: 120) == "B"
    assert cache.held_bytes == 220 and cache.keys() == ["a", "b"]
    cache.get("c", "c", 20, lambda: "C", resident=lambda value: 90)  # estimated to fit beside both; it holds more
    assert cache.keys() == ["b", "c"] and cache.held_bytes == 210


def test_model_too_big_for_memory_is_refused_before_loading(tmp_path, monkeypatch):
    from specdec_core import models

    folder = _tiny_folders(tmp_path, 1)[0]
    monkeypatch.setenv("SPECDEC_MEMORY_BUDGET_GB", "0.00001")
    models.MODELS.clear()
    with pytest.raises(ModelLoadError, match=r"needs about .* GiB of memory .* has 0.0 GiB"):
        load_model(folder)
    assert models.MODELS.keys() == []
