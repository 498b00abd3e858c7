"""Loading: clear refusals for what cannot be loaded, and the vocabulary check between draft and target."""

import json
import time

import pytest
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from transformers import PreTrainedTokenizerFast

from specdec_core import LoadedModel, ModelLoadError, VocabularyMismatchError, check_same_vocabulary, load_model


def word_tokenizer(words: list[str]) -> PreTrainedTokenizerFast:
    vocab = {w: i for i, w in enumerate(["<unk>"] + words)}
    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer(WordLevel(vocab, unk_token="<unk>")), unk_token="<unk>")


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


@pytest.mark.parametrize("source, message", [("!!!", "neither a hub id"), ("", "No model given"), ("/nope/x.gguf", "No GGUF file")])
def test_malformed_sources_are_refused(source, message):
    with pytest.raises(ModelLoadError, match=message):
        load_model(source)


def test_model_that_needs_remote_code_is_refused(tmp_path):
    config = {"model_type": "totally_custom_llm", "auto_map": {"AutoConfig": "conf.Custom", "AutoModelForCausalLM": "mod.Custom"}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match="trust_remote_code"):
        load_model(str(tmp_path))


def test_model_cache_is_bounded_and_evicts_the_least_recently_used(tmp_path):
    from specdec_core import models
    from tests.conftest import tiny_llama

    tokenizer = word_tokenizer(["a", "b"])
    folders = []
    for i in range(models.MODEL_CACHE_SIZE + 1):
        folder = tmp_path / f"m{i}"
        tiny_llama(seed=i).save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        folders.append(str(folder))
    models._load_cached.cache_clear()
    first = load_model(folders[0])
    assert load_model(folders[0]) is first  # a second run does not reload
    for folder in folders[1:]:
        load_model(folder)
    assert models._load_cached.cache_info().currsize == models.MODEL_CACHE_SIZE
    assert load_model(folders[0]) is not first  # evicted, then loaded anew
    models._load_cached.cache_clear()
