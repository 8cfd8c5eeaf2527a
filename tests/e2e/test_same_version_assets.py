"""One version, one output, through Dagster: the asset of a step whose version another step's asset already
materialised is reused (an alias), and its materialisation and the experiment's record say whose output."""

import json

from dagster import DagsterInstance, materialize
from pydantic import BaseModel

from marin_pipelines.defs.experiments_component import experiment_definitions
from marin_pipelines.defs.step_assets import asset_key
from marin_pipelines.execution_record import record_name
from marin_pipelines.experiment import Experiment
from marin_pipelines.resources import default_resources
from marin_pipelines.steps import Step, stage
from marin_pipelines.store import ArtifactStore

CALLS: list[str] = []


class Words(BaseModel):
    text: str = "hello"


@stage(Words)
def written(ctx, out, config):
    CALLS.append(ctx.step.name)
    (out.path / "words.txt").write_text(config.text)


@stage(Words)
def shouted(ctx, out, config, written):
    CALLS.append(ctx.step.name)
    (out.path / "words.txt").write_text((written.path / "words.txt").read_text().upper())


def test_a_reused_version_is_materialised_as_the_original_output(tmp_path):
    store_root = str(tmp_path / "store")
    first, second = Step("first/words", written, Words()), Step("second/words", written, Words())
    reader = Step("second/shouted", shouted, Words(), {"written": second})
    twins = [
        Step("third/words", written, Words(text="twin")),
        Step("fourth/words", written, Words(text="twin")),
    ]
    experiments = [
        Experiment("first", steps=[first]),
        Experiment("second", steps=[reader]),
        Experiment("twins", steps=twins),
    ]
    assets = experiment_definitions(experiments).assets
    instance, resources = DagsterInstance.ephemeral(), default_resources(store_root)
    store = ArtifactStore(store_root)

    def run(*steps: Step) -> dict[str, dict]:
        keys = [asset_key(s) for s in steps]
        result = materialize(assets, selection=keys, instance=instance, resources=resources)
        assert result.success
        found = [e.materialization for e in result.get_asset_materialization_events()]
        return {
            m.asset_key.to_user_string(): {k: getattr(v, "value", v) for k, v in m.metadata.items()}
            for m in found
        }

    CALLS.clear()
    run(first)
    original = store.get(first.key, first.version)
    shown = run(second, reader)
    assert CALLS == ["first/words", "second/shouted"]  # second/words was not computed again
    assert shown["second/words"]["reused"] is True and shown["second/words"]["same_as"] == "first/words"
    assert shown["second/words"]["path"] == original.url
    assert shown["second/shouted"]["reused"] is False and "same_as" not in shown["second/shouted"]
    shouted_out = store.get(reader.key, reader.version)
    assert (shouted_out.path / "words.txt").read_text() == "HELLO"  # read through the IO manager
    record = json.loads(store.read_text(record_name(experiments[1])))
    entry = next(s for s in record["steps"] if s["name"] == "second/words")
    assert entry["output"] == original.url and entry["same_as"] == "first/words"
    # two names of one version in one run: one is built, the other is reused although this run made it
    CALLS.clear()
    shown = run(*twins)
    assert len(CALLS) == 1 and {m["reused"] for m in shown.values()} == {True, False}
    alias = next(m for m in shown.values() if m["reused"])
    assert alias["same_as"] == CALLS[0] and alias["path"] == store.url(CALLS[0].split("/"), twins[0].version)
