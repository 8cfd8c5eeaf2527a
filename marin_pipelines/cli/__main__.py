"""``python -m marin_pipelines.cli COMMAND ...``: the command line without its console script (what the
launchers run in an image: ``train``, ``sft`` or ``eval`` with ``--step-config FILE``)."""

import sys

from marin_pipelines.cli import main

sys.exit(main())
