"""The Dagster-free step runner (``step_runner.run_steps``) on small stages of its own: partitions in order,
inputs as the assets' IO manager hands them, reuse, an earlier run's steps taken as found, and checks."""

import pytest
from pydantic import BaseModel

from marin_pipelines.step_runner import CheckFailed, run_steps
from marin_pipelines.steps import Check, Step, stage
from marin_pipelines.store import ArtifactStore


class Numbers(BaseModel):
    value: int = 1


def positive(artifact) -> tuple[bool, dict]:
    """The total is positive."""
    return artifact.metadata["total"] > 0, {"total": artifact.metadata["total"]}


def small(artifact) -> tuple[bool, dict]:
    """The total is below 10."""
    return artifact.metadata["total"] < 10, {"total": artifact.metadata["total"]}


@stage(Numbers, partitioning="ladder", partition_keys=lambda config, strict: ["a", "b"])
def per_rung(ctx, out, config):
    out.metadata["total"] = config.value + len(out.partition)


@stage(Numbers, partitioning="ladder")
def doubled(ctx, out, config, per_rung):
    out.metadata["total"] = 2 * per_rung.metadata["total"]


@stage(Numbers, checks={"positive": Check(positive), "small": Check(small, blocking=False)})
def summed(ctx, out, config, doubled):
    out.metadata["total"] = config.value * sum(a.metadata["total"] for a in doubled.values())


def graph(value: int = 1) -> tuple[Step, Step, Step]:
    rungs = Step("t/per_rung", per_rung, Numbers(value=value))
    twice = Step("t/doubled", doubled, Numbers(), {"per_rung": rungs})
    return rungs, twice, Step("t/summed", summed, Numbers(value=value), {"doubled": twice})


def test_partitions_inputs_reuse_and_an_earlier_runs_steps(tmp_path):
    store, lines = ArtifactStore(tmp_path), []
    rungs, twice, total = graph()
    first = run_steps([rungs], store, log=lines.append)
    assert sorted(first.partitions(rungs)) == ["a", "b"] and first.was_built(rungs, "a")
    run = run_steps([total], store, log=lines.append, found=first)
    # each partition reads its own partition upstream; the unpartitioned step reads them all
    assert {k: a.metadata["total"] for k, a in run.partitions(twice).items()} == {"a": 4, "b": 4}
    assert run.output(total).metadata["total"] == 8 and run.was_built(total)
    assert sum("t/per_rung" in line for line in lines) == 4  # computing + done, twice: not looked up again
    again = run_steps([total], store)
    assert again.output(total).metadata["total"] == 8 and not again.built  # everything reused


def test_a_blocking_check_stops_the_run_and_a_warning_is_told(tmp_path):
    lines: list[str] = []
    run_steps([graph(value=3)[2]], ArtifactStore(tmp_path / "warn"), log=lines.append)  # total 48
    assert any(line.startswith("warning: t/summed: check small did not pass") for line in lines)
    with pytest.raises(CheckFailed, match=r"t/summed: check positive did not pass \(The total is positive"):
        run_steps([graph(value=-1)[2]], ArtifactStore(tmp_path / "fail"))


def test_steps_whose_inputs_lead_back_to_themselves_are_an_error_naming_the_cycle(tmp_path):
    from marin_pipelines.experiment import Experiment
    from marin_pipelines.steps import StepError

    rungs, twice, total = graph()
    rungs.inputs["doubled"] = twice  # a mistake in an experiment file: per_rung now reads what it feeds
    with pytest.raises(StepError, match=r"cycle .*: t/doubled \(.*\) <- t/per_rung \(.*\) <- t/doubled"):
        Experiment("cyclic", steps=[total])
    with pytest.raises(StepError, match="cycle"):
        run_steps([total], ArtifactStore(tmp_path))
