import subprocess
import sys

HEAVY = (
    "jax",
    "dagster",
    "matplotlib",
    "marin_pipelines.experiment",
    "marin_pipelines.steps",
    "marin_pipelines.experiments.defaults",
    "marin_pipelines.defs",
)


def test_help_imports_no_heavy_library():
    """`--help` and argument errors answer at once: every subcommand imports its libraries when it runs."""
    code = (
        "import sys\n"
        "from marin_pipelines.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "process-crawl" in out and out.strip().splitlines()[-1] == "[]"


def test_printed_json_has_null_where_a_number_is_not_finite(capsys) -> None:
    import json

    from marin_pipelines.cli import print_json

    print_json({"loss": float("nan"), "runs": [1.5, float("inf")], "note": "kept"})
    assert json.loads(capsys.readouterr().out) == {"loss": None, "runs": [1.5, None], "note": "kept"}
