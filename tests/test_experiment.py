import pytest

from marin_pipelines.experiment import STAGES, Experiment, ExperimentError
from marin_pipelines.experiments.demo import demo


def downstream_of(stage: str) -> set[str]:
    out = {stage}
    for name, spec in STAGES.items():  # topological order
        if out & set(spec.deps):
            out.add(name)
    return out


def test_versions_are_stable():
    assert demo().versions == demo().versions


def test_changing_one_stage_recomputes_it_and_everything_downstream_only():
    base = demo().versions
    changed = Experiment.build(**{**demo().model_dump(), "curation": {"top_fraction": 0.5}}).versions
    different = {stage for stage in STAGES if base[stage] != changed[stage]}
    assert different == downstream_of("curated_text")
    assert "quality_scores" not in different and "tokenizer" in different and "scaling_law" in different


def test_user_crawl_version_follows_the_files(tmp_path):
    (tmp_path / "a.warc.gz").write_bytes(b"x")
    before = demo(str(tmp_path)).versions["crawl"]
    assert demo(str(tmp_path)).versions["crawl"] == before
    (tmp_path / "b.warc").write_bytes(b"y")
    assert demo(str(tmp_path)).versions["crawl"] != before
    assert before != demo().versions["crawl"]


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"train": {"steps": -1}}, "train.steps"),
        ({"model": {"size": "huge"}}, "model.size"),
        ({"curation": {"threshold": 0.5, "top_fraction": 0.5}}, "curation"),
        ({"tokenizer": {"vocab_sise": 10}}, "tokenizer.vocab_sise"),
        ({"name": "Bad Name"}, "name"),
    ],
)
def test_invalid_config_names_the_field(fields, named):
    with pytest.raises(ExperimentError) as error:
        Experiment.build(**{"name": "demo", **fields})
    assert named in str(error.value) and "Traceback" not in str(error.value)
