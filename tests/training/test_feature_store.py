"""The corpus's training features on disk: what with_layers makes, made once, resumed after an interruption."""

import pytest
import torch

import training.feature_store as feature_store
from training.corpus_features import with_layers
from training.draft_data import Sequence
from training.feature_store import stored_features
from training.train_head import tiny_target


@pytest.fixture
def data():
    rng = torch.Generator().manual_seed(2)
    return [Sequence(torch.randint(0, 256, (int(n),), generator=rng), 4, None) for n in torch.randint(10, 60, (30,), generator=rng)]


@pytest.mark.parametrize("layers", [(), (0, 1)])
def test_stored_features_are_what_with_layers_makes(data, tmp_path, layers):
    target = tiny_target()
    stored = stored_features(target, data, layers, tmp_path)
    made = with_layers(target, data, layers)
    for s, m in zip(stored, made):
        assert torch.equal(s.tokens, m.tokens) and s.prompt_length == m.prompt_length
        assert torch.equal(s.features, m.features)
        assert (s.last_layer is None) == (m.last_layer is None)
        assert s.last_layer is None or torch.equal(s.last_layer, m.last_layer)


def test_an_interrupted_store_resumes_after_its_last_chunk_and_a_new_corpus_gets_its_own(data, tmp_path, monkeypatch):
    monkeypatch.setattr(feature_store, "CHUNK_TOKENS", 200)  # several chunks of the small data
    target = tiny_target()
    computed: list[int] = []

    def compute_then_fail(chunk):
        if computed:
            raise KeyboardInterrupt  # stopped in the second chunk
        computed.append(len(chunk))
        return with_layers(target, chunk, ())

    with pytest.raises(KeyboardInterrupt):
        stored_features(target, data, (), tmp_path, compute_then_fail)
    counted: list[int] = []

    def compute_and_count(chunk):
        counted.append(len(chunk))
        return with_layers(target, chunk, ())

    stored = stored_features(target, data, (), tmp_path, compute_and_count)
    assert sum(counted) == len(data) - computed[0]  # the first chunk was not made again
    assert all(torch.equal(s.features, m.features) for s, m in zip(stored, with_layers(target, data, ())))
    assert stored_features(target, data, (), tmp_path, lambda chunk: pytest.fail("made again")) is not None
    stored_features(target, data[:-1], (), tmp_path)  # another corpus: another folder
    assert len(list(tmp_path.iterdir())) == 2
