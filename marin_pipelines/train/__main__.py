"""``python -m marin_pipelines.train --config FILE --data CACHE --out DIR``: what the launchers run.

The same command as ``marin-pipelines train``; a module path needs no console script in the image.
"""

import sys

from marin_pipelines.cli import main

sys.exit(main(["train", *sys.argv[1:]]))
