"""Training: the Llama-style model (dense or MoE), its optimisers (AdamW, AdamH, Muon), meshes, checkpoints
that resume bit for bit, warm starts, SFT, export and import (no Dagster).
"""
