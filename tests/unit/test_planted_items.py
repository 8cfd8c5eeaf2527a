"""What was planted reconciles with what was found: corpus_mixture's situation on three small installed
distributions' documentation, through the step runner (no Dagster). Four task items are planted; C4's
minimum of sentences removes one planted document before decontamination, and C4's line rule cuts another's
"Answer: ..." line, which leaves the question, found by its prompt alone."""

from marin_pipelines.documents import list_shards, read_shard
from marin_pipelines.experiment import Experiment
from marin_pipelines.experiments.defaults import corpus_and_text, dataset_dumps, decontaminate
from marin_pipelines.step_runner import run_steps
from marin_pipelines.store import ArtifactStore
from marin_pipelines.summary import planted_items

TASKS = ["marin_python_text", "marin_python_mc"]


def test_each_planted_item_is_found_removed_earlier_or_kept(tmp_path):
    dumps = dataset_dumps(
        "plant/dumps", modules=["json"], distributions=["idna", "pyarrow", "zstandard"], plant_tasks=TASKS
    )
    docs = corpus_and_text(
        "plant/docs", files=dumps, corpus={"globs": ["package_docs/*.jsonl.gz"], "text_field": "body"}
    )
    prompts = decontaminate("plant/clean", docs.deduplicated_text, against=TASKS)
    answers = decontaminate("plant/answers", docs.deduplicated_text, against=TASKS, match_prompt_alone=False)
    store = ArtifactStore(tmp_path)
    run_steps([prompts, answers], store)

    def get(step, partition=None):
        return store.get(step.key, step.version, partition)

    filtered = "removed by plant/docs/filtered_text (c4:min_sentences)"
    found = "found by plant/clean"
    assert planted_items(Experiment("plant", steps=[prompts]), get) == [
        f"planted by plant/dumps: 4; found 3; {filtered}: 1",
        f"  marin_python_text/0 (planted in idna/idna-3.20.dist-info/METADATA): {found}",
        f"  marin_python_text/1 (planted in pyarrow/pyarrow-26.0.1.dist-info/METADATA): {found}",
        f"  marin_python_mc/2 (planted in pyarrow/pyarrow/src/arrow/python/CMakeLists.txt): {filtered}",
        f"  marin_python_mc/4 (planted in zstandard/zstandard-0.25.0.dist-info/METADATA): {found}",
    ]
    removed = [row for shard in list_shards(get(prompts).url, "removed") for row in read_shard(shard)]
    cut = next(row for row in removed if row["id"].startswith("zstandard/"))
    assert cut["text"].endswith("Question: Which method adds one item to the end of a list?")  # no answer
    assert cut["shared_ngram"] == "which method adds one item to the end of a list"  # its prompt alone
    answers_only = planted_items(Experiment("plant", steps=[answers]), get)
    assert answers_only[0] == f"planted by plant/dumps: 4; found 2; kept: not found: 1; {filtered}: 1"
    assert answers_only[-1].endswith("zstandard-0.25.0.dist-info/METADATA): kept: not found")
