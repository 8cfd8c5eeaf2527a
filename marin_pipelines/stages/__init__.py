"""Stage functions: each builds one step's output from its config and inputs (core library, no Dagster).

A stage is ``run(ctx, out, config, **inputs)`` declared with ``@stage`` (``steps.py``): it writes files into
``out.path`` and metadata into ``out.metadata``, calling the library modules (``crawl/``, ``text/``, ...)
for the work itself. Experiments compose them into steps with the helpers in ``experiments/defaults.py``.
"""
