"""Every bench script still imports: a rename in the library breaks its bench here, not months later when
someone runs it. Importing one only defines things; its work runs under ``if __name__ == "__main__":``."""

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
SCRIPTS = sorted(BENCH.glob("*.py"))


def test_there_are_bench_scripts():
    assert len(SCRIPTS) >= 5


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_a_bench_script_imports_without_running(script: Path, monkeypatch, capsys):
    assert 'if __name__ == "__main__":' in script.read_text()
    monkeypatch.syspath_prepend(str(BENCH))  # scripts import their siblings (stage_costs: text_pipeline)
    spec = importlib.util.spec_from_file_location(f"bench_{script.stem}", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # as an import would (dataclasses look it up)
    spec.loader.exec_module(module)
    assert callable(module.main)
    assert capsys.readouterr().out == ""
