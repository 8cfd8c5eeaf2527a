"""Sweeps as processes: a sweep killed half-way and started again with the same flags continues, training no
finished trial again and resuming the one it was killed in; sweeps started apart on one output (one of them
with a second worker of its own) share the study and never train one trial twice."""

import json
import os
import signal
import subprocess
import threading
import time

from sweep_inputs import BASE, command, last_json, sweep_args, trial_lines, write_inputs

ENV = {**os.environ, "WANDB_MODE": "disabled", "JAX_PLATFORMS": "cpu"}
# seeds change no program: every trial runs the one compiled step
FLAGS = ["--sampler", "grid", "--pruner", "none"]


def test_a_killed_sweep_continues_without_training_finished_trials_again(token_cache, tmp_path):
    base = {**BASE, "train": {**BASE["train"], "steps": 200}}  # trial 1 trains on for seconds after step 10
    config, space = write_inputs(tmp_path, {"train.seed": [0, 1]}, base)
    out = tmp_path / "sweep"
    args = command(sweep_args(config, space, token_cache, out, 2, *FLAGS, "--report-every", "50"))
    process = subprocess.Popen(args, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(process.stderr), daemon=True)
    reader.start()
    second = out / "trials" / "0001"
    while not (second / "checkpoints" / "10").is_dir() and process.poll() is None:
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait()
    reader.join()
    killed = "".join(lines)
    assert trial_lines(killed, "complete") == [0] and trial_lines(killed, "started") == [0, 1]
    assert not (second / "train.json").exists(), "the kill came too late to test anything"
    first = {p: p.read_bytes() for p in (out / "trials" / "0000").iterdir() if p.is_file()}

    again = subprocess.run(args, env=ENV, capture_output=True, text=True, check=True)
    assert trial_lines(again.stderr, "started") == [] and trial_lines(again.stderr, "resumed") == [1]
    assert {p: p.read_bytes() for p in (out / "trials" / "0000").iterdir() if p.is_file()} == first
    summary = json.loads((second / "train.json").read_text())["summary"]
    assert summary["resumed_from_step"] >= 10 and len(summary["layouts"]) == 2
    assert last_json(again.stdout)["trials"] == {"complete": 2, "pruned": 0, "failed": 0}


def test_sweeps_sharing_a_study_never_train_one_trial_twice(token_cache, tmp_path):
    config, space = write_inputs(tmp_path, {"train.seed": list(range(6))})
    out = tmp_path / "sweep"
    args = command(sweep_args(config, space, token_cache, out, 6, *FLAGS, "--report-every", "10"))
    processes = [
        subprocess.Popen(more, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for more in ([*args, "--workers", "2"], args)
    ]
    printed = [process.communicate() for process in processes]
    assert [process.returncode for process in processes] == [0, 0], printed[0][1] + printed[1][1]

    started = [n for _, err in printed for n in trial_lines(err, "started")]
    assert sorted(started) == list(range(6))  # each trial started once, by one worker of one sweep
    assert [n for _, err in printed for n in trial_lines(err, "resumed")] == []
    for number in range(6):
        summary = json.loads((out / "trials" / f"{number:04d}" / "train.json").read_text())["summary"]
        assert summary["resumed_from_step"] == 0 and len(summary["layouts"]) == 1
    results = [last_json(stdout) for stdout, _ in printed]
    assert results[0] == results[1] and results[0]["trials"] == {"complete": 6, "pruned": 0, "failed": 0}
