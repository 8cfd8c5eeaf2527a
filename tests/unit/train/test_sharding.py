"""Data parallel + FSDP over 4 (forced host) CPU devices: the same losses as one device."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
from test_checkpoint import MODEL, TRAIN, read_metrics, repeating_batches

from marin_pipelines.train.trainer import train

SHORT = TRAIN.model_copy(update={"steps": 15})
FOUR_DEVICES = f"""
import json, sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
import jax
from test_checkpoint import MODEL, TRAIN, repeating_batches
from marin_pipelines.train.trainer import train
from marin_pipelines.train.sharding import data_mesh, state_shardings
assert jax.device_count() == 4
config = TRAIN.model_copy(update={{"steps": 15}})
train(MODEL, config, repeating_batches, sys.argv[1], progress=False)
spec = state_shardings({{"w": jax.numpy.zeros((32, 6))}}, data_mesh(), fsdp=True)["w"].spec
print(json.dumps({{"spec": [str(s) for s in spec]}}))
"""


def test_four_devices_match_one(tmp_path):
    train(MODEL, SHORT, repeating_batches, tmp_path / "one", progress=False)
    flags = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=4"
    env = {**os.environ, "XLA_FLAGS": flags, "JAX_PLATFORMS": "cpu"}
    out = subprocess.run(
        [sys.executable, "-c", FOUR_DEVICES, str(tmp_path / "four")], env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.splitlines()[-1])["spec"] == ["data", "None"]  # FSDP split the 32-row axis
    four = json.loads((tmp_path / "four" / "train.json").read_text())["summary"]
    assert four["devices"] == 4
    one_losses = [m["loss"] for m in read_metrics(tmp_path / "one")]
    four_losses = [m["loss"] for m in read_metrics(tmp_path / "four")]
    np.testing.assert_allclose(four_losses, one_losses, rtol=2e-4)
    assert one_losses[-1] < 0.8 * one_losses[0]
