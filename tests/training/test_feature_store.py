"""The corpus's training features on disk: what with_layers makes, made once, resumed after an interruption;
one store per corpus, layout and precision."""

import numpy as np
import pytest
import torch

import training.feature_store as feature_store
from specdec_core.cpu_kernels import release_dense_weights, speed_up_linears
from training.corpus_features import with_layers
from training.draft_data import TrainingSequence
from training.feature_store import stored_features
from training.shards import token_key
from training.tiny_chat import tiny_target


@pytest.fixture
def data():
    rng = torch.Generator().manual_seed(2)
    return [
        TrainingSequence(torch.randint(0, 256, (int(n),), generator=rng), 4, None)
        for n in torch.randint(10, 60, (30,), generator=rng)
    ]


@pytest.mark.parametrize("layers", [(), (0, 1)])
def test_stored_features_are_what_with_layers_makes(data, tmp_path, layers):
    target = tiny_target()
    stored = stored_features(target, data, layers, tmp_path)
    assert_same_features(stored, with_layers(target, data, layers))


def assert_same_features(stored, made):
    """Equal up to the kernels' rounding: the store's chunks batch (and pad) the sequences differently."""
    for s, m in zip(stored, made, strict=True):
        assert torch.equal(s.tokens, m.tokens) and s.prompt_length == m.prompt_length
        torch.testing.assert_close(s.features, m.features, rtol=2e-3, atol=2e-3)
        assert (s.last_layer is None) == (m.last_layer is None)
        if s.last_layer is not None:
            torch.testing.assert_close(s.last_layer, m.last_layer, rtol=2e-3, atol=2e-3)


def test_rows_the_generation_kept_are_copied_and_only_the_others_are_computed(data, tmp_path, monkeypatch):
    target = tiny_target()
    made = {token_key(s.tokens): m.features.numpy() + 1 for s, m in zip(data[::2], with_layers(target, data[::2], ()))}
    computed = []
    make = feature_store.with_layers
    monkeypatch.setattr(
        feature_store,
        "with_layers",
        lambda model, sequences, *a, **k: computed.extend(sequences) or make(model, sequences, *a, **k),
    )
    stored = stored_features(target, data, (), tmp_path, made=made)
    assert computed == data[1::2]
    reference = with_layers(target, data, ())
    assert_same_features(stored[1::2], reference[1::2])
    for s, m in zip(stored[::2], reference[::2]):
        assert torch.equal(s.features, m.features + 1)  # the kept rows, as given (shifted here to tell them apart)
    for layers, dtype in (
        ((0, 1), torch.float32),
        ((), torch.bfloat16),
    ):  # kept rows are a float32 forward's last layer
        with pytest.raises(ValueError, match="float32 forward's last layer"):
            stored_features(target, data, layers, tmp_path, dtype, made=made)


def test_an_interrupted_store_resumes_after_its_last_chunk_and_a_new_corpus_gets_its_own(data, tmp_path, monkeypatch):
    monkeypatch.setattr(feature_store, "CHUNK_TOKENS", 200)  # several chunks of the small data
    target = tiny_target()
    made: list[int] = []

    def fail_in_the_second_chunk(model, chunk, layers, dtype):
        if made:
            raise KeyboardInterrupt
        made.append(len(chunk))
        return with_layers(model, chunk, layers, dtype=dtype)

    monkeypatch.setattr(feature_store, "with_layers", fail_in_the_second_chunk)
    with pytest.raises(KeyboardInterrupt):
        stored_features(target, data, (), tmp_path)
    counted: list[int] = []

    def count(model, chunk, layers, dtype):
        counted.append(len(chunk))
        return with_layers(model, chunk, layers, dtype=dtype)

    monkeypatch.setattr(feature_store, "CHUNK_TOKENS", 300)  # other chunk bounds on resuming: sequences count
    monkeypatch.setattr(feature_store, "with_layers", count)
    stored = stored_features(target, data, (), tmp_path)
    assert sum(counted) == len(data) - made[0]  # the first chunk's sequences were not made again
    assert_same_features(stored, with_layers(target, data, ()))
    counted.clear()
    again = stored_features(target, data, (), tmp_path)
    assert not counted and all(torch.equal(a.features, s.features) for a, s in zip(again, stored))
    stored_features(target, data[:-1], (), tmp_path)  # another corpus: another folder
    assert len(list(tmp_path.iterdir())) == 2


def test_a_capped_run_makes_only_its_sequences_and_a_larger_one_goes_on_in_the_same_store(data, tmp_path, monkeypatch):
    monkeypatch.setattr(feature_store, "CHUNK_TOKENS", 200)
    target = tiny_target()
    counted: list[int] = []

    def count(model, chunk, layers, dtype):
        counted.append(len(chunk))
        return with_layers(model, chunk, layers, dtype=dtype)

    monkeypatch.setattr(feature_store, "with_layers", count)
    first = stored_features(target, data, (0, 1), tmp_path, count=10)
    assert len(first) == 10 and sum(counted) == 10
    counted.clear()
    everything = stored_features(target, data, (0, 1), tmp_path)
    assert sum(counted) == len(data) - 10 and len(list(tmp_path.iterdir())) == 1
    assert all(torch.equal(a.features, b.features) for a, b in zip(first, everything))  # the prefix was kept
    in_one_go = stored_features(target, data, (0, 1), tmp_path / "one go")
    assert_same_features(everything, in_one_go)  # other chunk bounds, the same features up to rounding
    with pytest.raises(ValueError, match="between 0 and"):
        stored_features(target, data, (0, 1), tmp_path, count=len(data) + 1)


def test_features_made_in_bfloat16_get_their_own_store_and_stay_close(data, tmp_path):
    target = tiny_target()
    exact = stored_features(target, data, (), tmp_path)
    rounded = stored_features(target, data, (), tmp_path, torch.bfloat16)
    assert len(list(tmp_path.iterdir())) == 2
    assert not all(torch.equal(a.features, b.features) for a, b in zip(exact, rounded))  # bfloat16 was used
    for a, b in zip(exact, rounded):
        torch.testing.assert_close(b.features.float(), a.features.float(), rtol=0.05, atol=0.05)


def test_a_target_with_packed_linears_gets_its_store_named_and_made(data, tmp_path):
    """A served-style target whose dense linear weights were released (specdec_core/cpu_kernels.py) still
    names its store by its weights, and a different checkpoint gets another store."""
    packed = release_dense_weights(speed_up_linears(tiny_target()))
    assert any(p.is_meta for p in packed.parameters())
    stored = stored_features(packed, data, (), tmp_path)
    assert_same_features(stored, with_layers(tiny_target(), data, ()))
    stored_features(release_dense_weights(speed_up_linears(tiny_target(seed=1))), data, (), tmp_path)
    assert len([p for p in tmp_path.iterdir() if p.is_dir()]) == 2


@pytest.mark.parametrize("free", [0, 2**40])
def test_the_store_is_read_from_memory_where_it_fits_and_from_the_map_where_it_does_not(
    data, tmp_path, monkeypatch, free
):
    target = tiny_target()
    monkeypatch.setattr(feature_store, "free_memory", lambda: free)
    rows, _ = feature_store._rows(tmp_path / "store", 50, 8)
    rows[:] = torch.arange(400, dtype=torch.float16).reshape(50, 8).numpy()
    resident = feature_store._resident(rows, 30)
    assert isinstance(resident, np.memmap) == (free == 0)
    assert (resident[:30] == rows[:30]).all()
    stored = stored_features(target, data, (), tmp_path)
    assert_same_features(stored, with_layers(target, data, ()))
