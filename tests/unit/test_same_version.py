"""One version, one output: a step's version does not hash its name, so a step of another name and the same
version reuses the output already in the store (an alias: a manifest with ``same_as``), found through the
version index or, in a store from before the index, through the execution records."""

import json
import shutil
from pathlib import Path

from pydantic import BaseModel

from marin_pipelines.execution_record import step_status, why_forked, write_record
from marin_pipelines.experiment import Experiment
from marin_pipelines.step_runner import run_steps
from marin_pipelines.steps import Step, StepContext, build_step, stage
from marin_pipelines.store import MANIFEST, VERSIONS, ArtifactStore

CALLS: list[tuple[str, str | None]] = []  # (step, partition) of every run of the stages below


class Words(BaseModel):
    text: str = "hello"


@stage(Words)
def written(ctx, out, config):
    CALLS.append((ctx.step.name, None))
    (out.path / "words.txt").write_text(config.text)
    out.metadata["length"] = len(config.text)


@stage(Words)
def shouted(ctx, out, config, written):
    CALLS.append((ctx.step.name, None))
    (out.path / "words.txt").write_text((written.path / "words.txt").read_text().upper())
    out.metadata["read_from"] = str(written.path)


@stage(Words, partitioning="ladder", partition_keys=lambda config, strict: ["x", "y|z"])
def per_rung(ctx, out, config):
    CALLS.append((ctx.step.name, out.partition))
    (out.path / "rung.txt").write_text(f"{config.text} {out.partition}")


def manifest_at(store: ArtifactStore, step: Step, partition: str | None = None) -> dict:
    return json.loads(Path(store.url(step.key, step.version, partition), MANIFEST).read_text())


def build(store: ArtifactStore, step: Step, partition: str | None = None, lines: list[str] | None = None):
    log = lines.append if lines is not None else lambda _: None
    return build_step(StepContext(step, store, partition, log=log, made_by={"run": "test"}), {})


def test_a_step_of_another_name_and_the_same_version_reuses_its_output(tmp_path):
    store, lines = ArtifactStore(tmp_path), []
    first, second = Step("a/words", written, Words()), Step("b/words", written, Words())
    assert first.version == second.version  # the name is not versioned
    original = build(store, first)
    CALLS.clear()
    downstream = Step("b/shouted", shouted, Words(), {"written": second})
    run = run_steps([downstream], store, log=lines.append)
    assert CALLS == [("b/shouted", None)]  # the stage of b/words did not run again
    assert f"b/words: reused version {second.version} of a/words ({original.url})" in lines
    assert not any(f"computing version {second.version}" in line for line in lines)
    alias = manifest_at(store, second)
    assert alias["same_as"] == {"asset": "a/words", "url": original.url}
    assert (
        alias["asset"] == "b/words"
        and alias["version"] == second.version
        and alias["config"] == {"text": "hello"}
    )
    assert sorted(p.name for p in Path(store.url(second.key, second.version)).iterdir()) == [MANIFEST]
    found = store.get(second.key, second.version)
    assert found.url == original.url and found.manifest == original.manifest
    assert found.version == second.version
    assert found.asked_as == "b/words" and found.same_as == "a/words"
    assert not run.was_built(second) and run.was_built(downstream)
    shouted_out = run.output(downstream)  # the downstream step of the new name read the original's files
    assert shouted_out.metadata["read_from"] == str(original.path)
    assert (shouted_out.path / "words.txt").read_text() == "HELLO"
    # the index names real outputs only: a third name aliases the original, never the alias
    index = json.loads((tmp_path / VERSIONS / first.version / "_.json").read_text())
    assert index == {"asset": "a/words", "url": original.url}
    third = Step("c/words", written, Words())
    assert build(store, third).url == original.url
    assert manifest_at(store, third)["same_as"]["asset"] == "a/words" and CALLS == [("b/shouted", None)]
    # an earlier version of the step, under the alias's name, is that one output, listed once
    assert [(a.url, a.version) for a in store.others(second.key, "0" * 12)] == [(original.url, first.version)]


def test_a_store_from_before_the_index_reuses_through_the_execution_records(tmp_path):
    store = ArtifactStore(tmp_path)
    first = Step("old/words", written, Words(text="indexed nowhere"))
    original = build(store, first)
    write_record(store, Experiment("old", steps=[first]))
    shutil.rmtree(tmp_path / VERSIONS, ignore_errors=True)  # what a store written before the index holds
    CALLS.clear()
    second = Step("new/words", written, Words(text="indexed nowhere"))
    found = build(store, second)
    assert CALLS == [] and found.url == original.url and found.same_as == "old/words"
    assert not (tmp_path / VERSIONS).exists()  # an alias is not indexed
    # the new experiment's record gives the original's output and says whose it is
    status = step_status(store, second)
    assert status["status"] == "done" and status["output"] == original.url
    assert status["same_as"] == "old/words"


def test_an_alias_whose_original_is_gone_is_incomplete_and_the_step_rebuilds(tmp_path):
    store, lines = ArtifactStore(tmp_path), []
    first, second = Step("a/words", written, Words()), Step("b/words", written, Words())
    original = build(store, first)
    build(store, second)
    assert "same_as" in manifest_at(store, second)
    shutil.rmtree(original.url)
    assert store.get(second.key, second.version) is None and store.same_version(second.version) is None
    CALLS.clear()
    rebuilt = build(store, second, lines=lines)
    assert CALLS == [("b/words", None)] and f"b/words: computing version {second.version}" in lines
    assert rebuilt.url == store.url(second.key, second.version) and rebuilt.same_as is None
    assert "same_as" not in manifest_at(store, second) and (rebuilt.path / "words.txt").read_text() == "hello"
    assert store.same_version(second.version).url == rebuilt.url  # the index now names the rebuilt one


def test_partitioned_steps_alias_per_partition(tmp_path):
    store, lines = ArtifactStore(tmp_path), []
    first, second = Step("a/rungs", per_rung, Words()), Step("b/rungs", per_rung, Words())
    original = build(store, first, "x")
    CALLS.clear()
    run = run_steps([second], store, log=lines.append)
    assert CALLS == [("b/rungs", "y|z")]  # the partition another name holds is reused, the other built
    outputs = run.partitions(second)
    assert outputs["x"].url == original.url and outputs["x"].same_as == "a/rungs"
    assert outputs["y|z"].same_as is None and (outputs["y|z"].path / "rung.txt").read_text() == "hello y|z"
    assert not run.was_built(second, "x") and run.was_built(second, "y|z")
    assert f"b/rungs [x]: reused version {second.version} of a/rungs ({original.url})" in lines
    assert manifest_at(store, second, "x")["same_as"] == {"asset": "a/rungs", "url": original.url}
    assert manifest_at(store, second, "x")["partition"] == "x"
    index = tmp_path / VERSIONS / second.version
    assert sorted(p.name for p in index.iterdir()) == ["x.json", "y,z.json"]
    assert json.loads((index / "y,z.json").read_text())["asset"] == "b/rungs"
    assert step_status(store, second)["same_as"] == {"x": "a/rungs"}


def test_an_alias_on_a_bucket_reads_the_originals_files(tmp_path, monkeypatch):
    """Object storage (no rename): the index entry and the alias's manifest are single objects."""
    monkeypatch.setenv("MARIN_CACHE_DIR", str(tmp_path / "cache"))
    store = ArtifactStore(f"memory://bucket/{tmp_path.name}")
    first, second = Step("a/words", written, Words(text="up")), Step("b/words", written, Words(text="up"))
    original = build(store, first)
    CALLS.clear()
    found = build(store, second)
    assert CALLS == [] and found.url == original.url == f"{store.root}/a/words/_/{first.version}"
    assert found.read_bytes("words.txt") == b"up" and (found.path / "words.txt").read_text() == "up"
    alias = json.loads(store.read_text(f"b/words/_/{second.version}/{MANIFEST}"))
    assert alias["same_as"] == {"asset": "a/words", "url": original.url} and alias["files"] == []
    assert json.loads(store.read_text(f"{VERSIONS}/{first.version}/_.json"))["asset"] == "a/words"


def test_why_a_hash_forked_reads_an_aliased_earlier_version_by_its_inputs_versions(tmp_path):
    """The earlier version of b/shouted is a/shouted's output, which records a/words as its input: the same
    version as b/words, so only the config changed."""
    store = ArtifactStore(tmp_path)
    a_words, b_words = Step("a/words", written, Words()), Step("b/words", written, Words())
    run_steps([Step("a/shouted", shouted, Words(), {"written": a_words})], store)
    earlier = Step("b/shouted", shouted, Words(), {"written": b_words})
    assert run_steps([earlier], store).output(earlier).same_as == "a/shouted"
    louder = Step("b/shouted", shouted, Words(text="louder"), {"written": b_words})
    assert why_forked(store, louder, None) == {
        "since": earlier.version,
        "config": ["text"],
        "inputs": [],
        "other": [],
    }
