"""Teacher-forced agreement on the evaluation sets (bench/agreement.py), on a tiny random chat model: the
target's answers are generated once and cached, and each category's agreement is its share of positions."""

import json

import torch

from bench.agreement import answers, head_agreement, save_beside
from specdec_core.drafters.eagle_head import AGREEMENT_NAME, save_head
from specdec_core.eval_sets import by_category
from training.corpus_features import with_layers
from training.tiny_chat import tiny_chat_model, tiny_chat_tokenizer
from training.train_head import Settings, new_head, train


def test_answers_are_cached_and_agreement_counts_every_position_once(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(tmp_path / "cache"))
    tokenizer = tiny_chat_tokenizer()
    target = tiny_chat_model(tokenizer)
    with torch.no_grad():  # without its end-of-turn bias the tiny model answers at length (in loops a head can learn)
        target.lm_head.bias.zero_()
    data = answers(target, tokenizer, "realistic", 1, 24)
    assert list(data) == list(by_category("realistic", 1))
    again = answers(target, tokenizer, "realistic", 1, 24)  # from the cache: the same ids
    assert all(torch.equal(a.tokens, b.tokens) for c in data for a, b in zip(data[c], again[c], strict=True))
    assert list((tmp_path / "cache" / "eval-answers").glob("realistic-*.pt"))
    rows = [s for category in data.values() for s in category]
    for layers in ((), (0, 1)):
        # a head trained a little on these very answers, so that it agrees somewhere
        settings = Settings(
            draft_vocab=256,
            depth=2,
            epochs=12,
            batch_tokens=1024,
            lr=1e-2,
            evals_per_epoch=1,
            feature_layers=",".join(map(str, layers)),
        )
        featurized = with_layers(target, rows, layers)
        torch.manual_seed(0)
        head = new_head(target, "tiny", featurized, settings, {tokenizer.eos_token_id})
        train(head, featurized, featurized[:2], settings, tmp_path / f"checkpoint{len(layers)}.pt")
        save_head(head, tmp_path / f"head{len(layers)}")
        result = head_agreement(tmp_path / f"head{len(layers)}", target, data, depth=2)
        assert set(result) == set(data) | {"all"} and all(len(v) == 2 for v in result.values())
        assert result["all"][0] > 0 and all(0 <= share <= 1 for shares in result.values() for share in shares)
        # "all" weighs each category by its predicted positions: response tokens from the third position on
        positions = {c: sum(len(s.tokens) - max(s.prompt_length, 2) for s in category) for c, category in data.items()}
        weighted = sum(result[c][0] * n for c, n in positions.items()) / sum(positions.values())
        assert abs(result["all"][0] - weighted) < 1e-3
        # --save-beside: this head's slice of a report over several, in its own folder
        folder = tmp_path / f"head{len(layers)}"
        report = {
            "when": "now",
            "machine": {},
            "tokens": 24,
            "per_category": 1,
            "depth": 2,
            "suites": {"realistic": {str(folder): result, "other": {}}},
        }
        save_beside(folder, report)
        assert json.loads((folder / AGREEMENT_NAME).read_text())["suites"] == {"realistic": result}
