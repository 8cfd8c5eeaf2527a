"""The engine seam: units in input order on any number of workers, done records written last, a rerun
that does only the units without one, and the command line's engine flags."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from marin_pipelines.engine import (
    DONE,
    LocalEngine,
    RayEngine,
    finish_units,
    make_engine,
    map_units,
    read_done,
)


def square_into_file(unit: int, item: int, folder: Path) -> dict[str, int]:
    """A unit: one file named by its unit, and a result; it logs each run in a shared ledger."""
    (folder / f"part-{unit:05d}.txt").write_text(str(item * item))
    with open(os.environ["LEDGER"], "a") as ledger:
        ledger.write(f"{unit}\n")
    return {"square": item * item}


def fail_on_three(unit: int, item: int, folder: Path) -> dict[str, int]:
    if item == 3:
        raise ValueError("three is not welcome")
    return square_into_file(unit, item, folder)


@pytest.fixture
def ledger(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "ledger"
    path.touch()
    monkeypatch.setenv("LEDGER", str(path))
    return path


def runs(ledger: Path) -> list[int]:
    return sorted(int(line) for line in ledger.read_text().split())


@pytest.mark.parametrize("workers", [1, 2])
def test_results_come_in_input_order_and_files_land_in_work(workers, ledger, tmp_path):
    told = []
    work = str(tmp_path / "work")
    engine = LocalEngine(workers)
    results = map_units(engine, square_into_file, [3, 1, 2], work, lambda d, t: told.append((d, t)))
    assert results == [{"square": 9}, {"square": 1}, {"square": 4}]
    assert told[0] == (0, 3) and told[-1] == (3, 3)
    finish_units(work)
    assert sorted(p.name for p in Path(work).iterdir()) == [f"part-0000{i}.txt" for i in range(3)]
    assert (Path(work) / "part-00000.txt").read_text() == "9"


def test_a_rerun_does_only_the_units_without_a_done_record(ledger, tmp_path):
    work = tmp_path / "work"
    with pytest.raises(ValueError, match="three is not welcome"):
        map_units(LocalEngine(1), fail_on_three, [1, 2, 3, 4], str(work))
    assert runs(ledger) == [0, 1]  # unit 2 failed, unit 3 never started
    assert sorted(read_done(str(work))) == [0, 1]
    assert map_units(LocalEngine(1), square_into_file, [1, 2, 3, 4], str(work)) == [
        {"square": n * n} for n in (1, 2, 3, 4)
    ]
    assert runs(ledger) == [0, 1, 2, 3]  # 0 and 1 were not done again


def test_a_unit_whose_files_are_not_all_there_is_done_again(ledger, tmp_path):
    work = tmp_path / "work"
    map_units(LocalEngine(1), square_into_file, [5, 6], str(work))
    (work / "part-00001.txt").unlink()  # e.g. a bucket listing that lost an object, or a hand
    record = json.loads((work / DONE / "00000.json").read_text())
    record["files"][0]["bytes"] += 1
    (work / DONE / "00000.json").write_text(json.dumps(record))  # a file of another size
    assert read_done(str(work)) == {}
    assert map_units(LocalEngine(1), square_into_file, [5, 6], str(work)) == [{"square": 25}, {"square": 36}]
    assert runs(ledger) == [0, 0, 1, 1]


def test_scratch_of_a_killed_unit_is_never_published(ledger, tmp_path):
    work = tmp_path / "work"
    (work / ".unit-00000.dead").mkdir(parents=True)
    (work / ".unit-00000.dead" / "part-00000.txt").write_text("half")
    map_units(LocalEngine(1), square_into_file, [7], str(work))
    finish_units(str(work))
    assert sorted(p.name for p in work.iterdir()) == ["part-00000.txt"]
    assert (work / "part-00000.txt").read_text() == "49"


def test_engine_flags_are_checked():
    assert make_engine("local", workers=3) == LocalEngine(3)
    assert make_engine("ray", "10.0.0.1:6379") == RayEngine("10.0.0.1:6379")
    with pytest.raises(ValueError, match="--engine 'spark': choose one of local, ray"):
        make_engine("spark")
    with pytest.raises(ValueError, match="--ray-address is for --engine ray"):
        make_engine("local", "10.0.0.1:6379")
