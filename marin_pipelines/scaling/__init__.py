"""Scaling laws: IsoFLOP ladders and their recipe, the frontier fit, preregistered forecasts with calibrated
intervals, the ladder planner and the speedrun (no Dagster).
"""
