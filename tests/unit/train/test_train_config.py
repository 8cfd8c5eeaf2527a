"""The run config and the run directory's file names load without JAX: run configs, the scaling recipe and
the comparison read them in processes that never train."""

import subprocess
import sys


def test_the_config_module_imports_no_jax():
    code = (
        "import sys\n"
        "import marin_pipelines.train.train_config, marin_pipelines.evals.comparison\n"
        "print(sorted(m for m in ('jax', 'flax', 'optax', 'orbax') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
