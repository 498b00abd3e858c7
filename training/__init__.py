"""Training the EAGLE draft head, outside the serving path: its data (draft_data) and its loop (train_head).

The larger corpus (python -m training.corpus): prompts the target writes itself (self_prompts) and
task families (task_families, from assets/corpus_seeds.json), filtered (quality, dedupe,
eval_overlap; words and n-grams in text_ngrams) and described (diversity), then the target's answers,
all generated in resumable shards of token ids (generation, shards); corpus_features recomputes the
target's features from those ids. throughput measures generation speed; tiny_chat is the tiny
random chat target of the --smoke run.
"""
