"""The reverse report on an evaluation: the items a decontamination upstream of the training data found."""

from marin_pipelines.stages.evals import decontaminated_items
from marin_pipelines.store import ArtifactStore


def test_items_found_upstream_of_the_training_caches_are_gathered(tmp_path):
    store = ArtifactStore(tmp_path)
    tokenizer = "a/tokenizer@v1"
    steps = {
        "a/decontaminated_text": ({"items_in_training_data": {"mc": ["2"], "text": ["0", "1"]}}, {}),
        "b/decontaminated_text": ({"items_in_training_data": {"text": ["1", "4"], "qa": []}}, {}),
        "a/tokenizer": ({}, {}),
        "a/tokenized_cache": (
            {},
            {"curated_text": "a/decontaminated_text@v1", "tokenizer": tokenizer},
        ),
        "b/tokenized_cache": (
            {},
            {"curated_text": "b/decontaminated_text@v1", "tokenizer": tokenizer},
        ),
        "c/tokenized_cache": ({}, {"curated_text": "c/curated_text@v1"}),  # made elsewhere: not in this store
    }
    for name, (metadata, upstream) in steps.items():
        with store.write(name.split("/"), "v1", upstream=upstream) as out:
            out.metadata.update(metadata)
    urls = [store.url(["a", "tokenized_cache"], "v1"), store.url(["b", "tokenized_cache"], "v1")]
    assert decontaminated_items(store, urls) == {"mc": ["2"], "text": ["0", "1", "4"]}
    assert decontaminated_items(store, [store.url(["c", "tokenized_cache"], "v1")]) == {}
    made_by_the_command = tmp_path / "cli_cache"  # `marin-pipelines tokenize`: no manifest, no lineage
    made_by_the_command.mkdir()
    assert decontaminated_items(store, [str(made_by_the_command), *urls]) == {
        "mc": ["2"],
        "text": ["0", "1", "4"],
    }
