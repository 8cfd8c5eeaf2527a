"""Generation: a KV cache, sampling and continuous batching over the models the trainer makes (no Dagster)."""
