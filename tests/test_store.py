import json

import pytest

from marin_pipelines.documents import Funnel, read_documents, write_stage
from marin_pipelines.store import ArtifactStore, version_hash


def test_version_hash_is_stable_and_order_free():
    assert version_hash({"a": 1, "b": [1, 2]}) == version_hash({"b": [1, 2], "a": 1})
    assert version_hash({"a": 1}) != version_hash({"a": 2})


def test_write_is_atomic_and_manifest_lists_files(tmp_path):
    store = ArtifactStore(tmp_path)
    with store.write(["demo", "stage"], "v1", config={"x": 1}) as out:
        (out.path / "data.txt").write_text("hello")
        out.metadata["count"] = 3
    artifact = store.get(["demo", "stage"], "v1")
    assert artifact is not None and artifact.metadata == {"count": 3}
    (entry,) = artifact.manifest["files"]
    assert entry["name"] == "data.txt" and entry["bytes"] == 5 and len(entry["sha256"]) == 64
    assert list((tmp_path / "demo" / "stage" / "_").iterdir()) == [artifact.path]  # no temporary left


def test_failed_write_leaves_nothing_that_is_read(tmp_path):
    store = ArtifactStore(tmp_path)
    with pytest.raises(RuntimeError), store.write(["demo", "stage"], "v1") as out:
        (out.path / "half.txt").write_text("half")
        raise RuntimeError("killed")
    assert store.get(["demo", "stage"], "v1") is None
    assert not any((tmp_path / "demo" / "stage" / "_").iterdir())


def test_directory_without_manifest_is_not_trusted(tmp_path):
    store = ArtifactStore(tmp_path)
    store.path(["a"], "v1").mkdir(parents=True)
    assert store.get(["a"], "v1") is None
    with store.write(["a"], "v1") as out:  # a rerun replaces the leftover
        (out.path / "f").write_text("x")
    assert store.get(["a"], "v1") is not None


def test_multi_partition_keys_become_folder_names(tmp_path):
    path = ArtifactStore(tmp_path).path(["demo", "ladder"], "v", "1e11|nano")
    assert path.parent.name == "1e11,nano"


def test_write_stage_keeps_removed_documents_with_reason(tmp_path):
    docs = [({"id": "a", "text": "x"}, None), ({"id": "b", "text": "y"}, "too_short"), ({"id": "c"}, "empty")]
    funnel = write_stage(iter(docs), tmp_path, shard_size=1)
    assert funnel.as_dict() == {"docs_in": 3, "docs_out": 1, "removed": {"empty": 1, "too_short": 1}}
    assert funnel.conserved
    assert [d["id"] for d in read_documents(tmp_path)] == ["a"]
    removed = list(read_documents(tmp_path, prefix="removed"))
    assert [(d["id"], d["reason"]) for d in removed] == [("b", "too_short"), ("c", "empty")]
    assert Funnel.from_dict(json.loads(json.dumps(funnel.as_dict()))) == funnel
