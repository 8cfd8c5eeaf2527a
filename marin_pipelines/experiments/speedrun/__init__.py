"""Speedrun submissions: one file each, defining ``SUBMISSION`` (``scaling/speedrun.py``).

To submit: copy a file here, change the author, description, model and training, pick budgets, and
run ``marin-pipelines demo`` (or materialise ``speedrun_leaderboard``); the leaderboard ranks it.
"""
