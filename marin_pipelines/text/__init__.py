"""Document shards to clean text: main-content extraction, heuristic quality filters, exact and fuzzy
deduplication, decontamination against evaluation data (no Dagster).
"""
