"""The Dagster layer, thin: steps become assets (the experiments Component), plus resources, jobs and
automation. ``definitions.py`` loads this folder with ``load_from_defs_folder``; nothing here does the
work itself (that is ``stages/`` and the library beneath it)."""
