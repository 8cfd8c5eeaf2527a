"""Hyperparameter search on Optuna: the search space over a run's config, the study stored beside the sweep's
output, trials that report and are pruned while they train, the best config (no Dagster).
"""
