"""Text to tokens: BPE tokenizers, token caches with O(1) random access, chat data, data mixtures and the
loader that reads them into batches (no Dagster).
"""
