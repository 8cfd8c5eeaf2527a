"""The IsoFLOP ladder the slow tests train: the recipe's 3 shapes at each of 3 budgets, 200-350 steps of
4-128 sequences of 32 tokens, seconds a rung on 2 cores. A test adds its target (and may lengthen seq_len)."""

TINY_LADDER = {
    "recipe": {"name": "delphi", "head_dim": 8},
    "budgets": [1e10, 2e10, 4e10],
    "points_per_budget": 3,
    "vocab_size": 512,
    "seq_len": 32,
}
