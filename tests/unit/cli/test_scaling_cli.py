import json

import numpy as np
import pytest

from marin_pipelines.cli import main


def write_runs(path, rows):
    path.write_text("params,tokens,loss\n" + "".join(f"{n},{d},{loss}\n" for n, d, loss in rows))


def test_fit_scaling_law_prints_one_json_object(tmp_path, capsys):
    rows = [
        (n, d, 1.69 + 406.4 / n**0.34 + 410.7 / d**0.28)
        for n in np.geomspace(1e7, 1e9, 3)
        for d in np.geomspace(1e9, 1e11, 3)
    ]
    write_runs(tmp_path / "runs.csv", rows)
    code = main(
        [
            "fit-scaling-law",
            "--runs",
            str(tmp_path / "runs.csv"),
            "--predict",
            "1e10,2e11",
            "--bootstrap",
            "5",
        ]
    )
    assert code == 0
    out = json.loads(capsys.readouterr().out)  # exactly one JSON object on stdout
    assert out["method"] == "chinchilla"
    assert out["alpha"]["value"] == pytest.approx(0.34, rel=0.01) and len(out["alpha"]["interval"]) == 2
    for name in ("E", "A", "B", "beta"):
        assert name in out
    [prediction] = out["predictions"]
    assert prediction["loss"] == pytest.approx(1.69 + 406.4 / 1e10**0.34 + 410.7 / 2e11**0.28, rel=0.01)


@pytest.mark.parametrize(
    ("csv", "args", "message"),
    [
        ("params,tokens\n1,2\n", [], "missing columns ['loss']"),
        ("params,tokens,loss\n1,x,3\n", [], "line 2"),
        ("params,tokens,loss\n1,2,3\n", ["--predict", "1e9"], "PARAMS,TOKENS"),
    ],
)
def test_fit_scaling_law_errors_name_the_problem(tmp_path, capsys, csv, args, message):
    (tmp_path / "runs.csv").write_text(csv)
    assert main(["fit-scaling-law", "--runs", str(tmp_path / "runs.csv"), *args]) == 2
    assert message in capsys.readouterr().err


def test_leaderboard_prints_the_table_and_writes_the_plot(tmp_path, capsys):
    for name, bpb in (("a", 2.0), ("b", 1.8)):
        (tmp_path / "results" / name).mkdir(parents=True)
        record = {
            "submission": name,
            "author": "me",
            "description": "d",
            "budget": 1e10,
            "params": 10,
            "tokens": 10,
            "model_flops": 1e10,
            "hardware_flops": 2e10,
            "wall_seconds": 1.0,
            "hardware": "cpu: cpu",
            "devices": 1,
            "peak_flops": 1e9,
            "bits_per_byte": bpb,
        }
        (tmp_path / "results" / name / "results.json").write_text(json.dumps(record))
    assert main(["leaderboard", "--results", str(tmp_path / "results"), "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert out.index("| b *") < out.index("| a ")
    assert (tmp_path / "out" / "leaderboard.png").read_bytes()[:4] == b"\x89PNG"


def test_leaderboard_without_results_is_a_clear_error(tmp_path, capsys):
    assert main(["leaderboard", "--store-root", str(tmp_path)]) == 2
    assert "marin-pipelines demo" in capsys.readouterr().err
