"""Training the EAGLE draft head, outside the serving path: its data (draft_data) and its loop (train_head)."""
