import pytest

from marin_pipelines.experiment import Experiment
from marin_pipelines.experiments import demo
from marin_pipelines.experiments.defaults import (
    crawl_and_text,
    forecast_target,
    isoflop_ladder,
    package_text,
    quality_and_curation,
    speedrun,
    tokenizer_and_cache,
    train,
    variant,
)
from marin_pipelines.steps import Step, StepError, topological


def declare_demo(**changes: dict) -> list[Step]:
    """The demo's graph declared again with the helpers, from the demo's own step configs, with
    ``changes`` merged into the config of one helper argument (``curation={"top_fraction": 0.5}``).

    Built beside the demo, never in one experiment with it: a second config under one name is an error."""

    def fields(argument: str, config) -> dict:
        return {**config.model_dump(), **changes.get(argument, {})}

    text = demo.text
    texts = crawl_and_text(
        "demo",
        warc_root=text.crawl.config.warc_root,
        demo=fields("demo", text.crawl.config.demo),
        web_documents=fields("web_documents", text.web_documents.config),
        extract=fields("extract", text.extracted_text.config),
        filters=fields("filters", text.filtered_text.config),
        dedup=fields("dedup", text.deduplicated_text.config),
    )
    quality = quality_and_curation(
        "demo",
        texts.deduplicated_text,
        quality=fields("quality", demo.quality.quality_scores.config),
        curation=fields("curation", demo.quality.curated_text.config),
    )
    tokens = tokenizer_and_cache(
        "demo",
        quality.curated_text,
        tokenizer=fields("tokenizer", demo.tokens.tokenizer.config),
        cache=fields("cache", demo.tokens.cache.config),
    )
    code = package_text("demo/package_text", **fields("package_text", demo.code.config))
    code_tokens = tokenizer_and_cache(
        "demo/package",
        code,
        tokenizer=tokens.tokenizer,
        cache=fields("code_cache", demo.code_tokens.cache.config),
    )
    sources = demo.MIXTURE["sources"]
    runs = demo.ladder.checkpoints.config
    ladder = isoflop_ladder(
        "demo",
        tokens,
        ladder=fields("ladder", runs.ladder),
        train=fields("ladder_train", runs.train),
        data_mixture={"sources": {**sources, "code": {**sources["code"], "cache": code_tokens}}},
        evals=fields("evals", demo.ladder.evaluations.config.evals),
        batch_size=demo.ladder.evaluations.config.batch_size,
    )
    target = forecast_target(
        "demo",
        ladder,
        downstream=demo.target.prediction.config.downstream,
        evals=fields("evals", demo.target.evaluation.config.evals),
        batch_size=demo.target.evaluation.config.batch_size,
    )
    board = demo.leaderboard.config
    leaderboard = speedrun("demo/speedrun_leaderboard", tokens, board.submissions, board.eval_batch_size)
    return topological([target.scaling_law, leaderboard])


def versions(steps: list[Step]) -> dict[str, str]:
    return {step.name: step.version for step in steps}


def downstream_of(steps: list[Step], name: str) -> set[str]:
    """``name`` and every step that reads it, directly or not (through inputs: ``after`` versions nothing)."""
    out = {name}
    for step in steps:  # topological order
        if out & {upstream.name for upstream in step.inputs.values()}:
            out.add(step.name)
    return out


def test_versions_are_stable():
    first, second = declare_demo(), declare_demo()
    assert all(a is not b for a, b in zip(first, second, strict=True))  # new objects, the same versions
    assert versions(first) == versions(second) == versions(demo.demo.all_steps)
    assert len(set(versions(first).values())) == len(first)  # and one version per step


def test_changing_one_step_recomputes_it_and_everything_downstream_only():
    base = versions(demo.demo.all_steps)
    changed = versions(declare_demo(curation={"top_fraction": 0.5}))
    assert changed.keys() == base.keys()
    different = {name for name in base if base[name] != changed[name]}
    assert different == downstream_of(demo.demo.all_steps, "demo/curated_text")
    assert "demo/quality_scores" not in different
    assert {
        "demo/curated_text",
        "demo/tokenizer",
        "demo/package/tokenized_cache",
        "demo/isoflop_law",
    } <= different
    assert not {"demo/crawl", "demo/deduplicated_text", "demo/package_text"} & different


def test_user_crawl_version_follows_the_files(tmp_path):
    def crawl_version(root: str | None) -> str:
        return crawl_and_text("demo", warc_root=root).crawl.version

    (tmp_path / "a.warc.gz").write_bytes(b"x")
    before = crawl_version(str(tmp_path))
    assert crawl_version(str(tmp_path)) == before
    (tmp_path / "b.warc").write_bytes(b"y")
    assert crawl_version(str(tmp_path)) != before
    assert before != crawl_version(None) == demo.text.crawl.version


@pytest.mark.parametrize(
    ("declare", "named"),
    [
        (
            lambda: train("bad/checkpoint", demo.tokens, train={"steps": -1}),
            ["bad/checkpoint", "train.steps"],
        ),
        (
            lambda: train("bad/checkpoint", demo.tokens, model={"size": "huge"}),
            ["bad/checkpoint", "model.size"],
        ),
        (
            lambda: quality_and_curation(
                "bad", demo.text.deduplicated_text, curation={"threshold": 0.5, "top_fraction": 0.5}
            ),
            ["bad/curated_text", "CurationConfig", "threshold", "top_fraction"],
        ),
        (
            lambda: tokenizer_and_cache("bad", demo.quality.curated_text, tokenizer={"vocab_sise": 10}),
            ["bad/tokenizer", "vocab_sise"],
        ),
        (lambda: crawl_and_text("Bad Name"), ["Bad Name/crawl", "step name"]),
        (lambda: Experiment("Bad Name", steps=[demo.leaderboard]), ["experiment 'Bad Name'", "name"]),
    ],
)
def test_invalid_config_names_the_field(declare, named):
    with pytest.raises(StepError) as error:
        declare()
    message = str(error.value)
    assert all(part in message for part in named), message
    assert "tests/unit/test_experiment.py:" in message  # where it was declared
    assert "Traceback" not in message


def test_where_a_run_computes_is_not_part_of_its_version():
    """The mesh, FSDP and the MFU's peak say where a run computes: the same run on another layout is the same
    output (and resumes in the same work folder); what it computes still forks the version."""
    run = demo.target.checkpoint
    moved = variant(run, run.name, train={"mesh": {"model": 2}, "fsdp": False, "peak_flops": 1e12})
    assert moved.config.train.mesh.model == 2 and moved.version == run.version
    assert variant(run, run.name, train={"seed": 1}).version != run.version
