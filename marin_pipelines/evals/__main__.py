"""``python -m marin_pipelines.evals --checkpoint DIR ... --out FILE.json``: what the launchers run.

The same command as ``marin-pipelines eval``; a module path needs no console script in the image.
"""

import sys

from marin_pipelines.cli import main

sys.exit(main(["eval", *sys.argv[1:]]))
