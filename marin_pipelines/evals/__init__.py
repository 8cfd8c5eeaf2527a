"""Evaluation: bits per byte, chat loss, lm-eval tasks in process or against a served model, comparisons with
their verdicts, and the leaderboard over every evaluation in the store (no Dagster).
"""
