import json
from pathlib import Path

import fsspec
import pytest

from marin_pipelines.documents import Funnel, read_documents, write_stage
from marin_pipelines.store import MANIFEST, ArtifactStore, local_copy, version_hash


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
    Path(store.url(["a"], "v1")).mkdir(parents=True)
    assert store.get(["a"], "v1") is None
    with store.write(["a"], "v1") as out:  # a rerun replaces the leftover
        (out.path / "f").write_text("x")
    assert store.get(["a"], "v1") is not None


def test_multi_partition_keys_become_folder_names(tmp_path):
    url = ArtifactStore(tmp_path).url(["demo", "ladder"], "v", "1e11|nano")
    assert url.split("/")[-2] == "1e11,nano"


def test_work_folder_survives_a_failure_and_becomes_the_output_when_kept(tmp_path):
    """What a launched child writes (a training run) outlives a failed attempt; the retry resumes there."""
    store = ArtifactStore(tmp_path)
    with pytest.raises(RuntimeError), store.write(["ckpt"], "v1") as out:
        Path(out.work).mkdir(parents=True)
        (Path(out.work) / "step-1").write_text("checkpoint")
        raise RuntimeError("preempted")
    assert store.get(["ckpt"], "v1") is None
    with store.write(["ckpt"], "v1") as out:
        assert (Path(out.work) / "step-1").read_text() == "checkpoint"  # the second attempt finds it
        (Path(out.work) / "step-2").write_text("checkpoint")
        (out.path / "summary.json").write_text("{}")
        out.keep_work()
    artifact = store.get(["ckpt"], "v1")
    assert [f["name"] for f in artifact.manifest["files"]] == ["step-1", "step-2", "summary.json"]
    assert not Path(out.work).exists()


@pytest.mark.parametrize("fail", [False, True])
def test_store_on_a_bucket(gcs_root, tmp_path, monkeypatch, fail):
    """gs:// through a real Cloud Storage API: files first, the manifest last, nothing read before it."""
    monkeypatch.setenv("MARIN_CACHE_DIR", str(tmp_path / "cache"))
    store = ArtifactStore(gcs_root)
    fs, root = fsspec.url_to_fs(gcs_root)
    fs.pipe_file(f"{root}/a/_/v1/stale.txt", b"left by a killed upload")  # no manifest: never trusted
    assert store.get(["a"], "v1") is None
    fs.pipe_file(f"{root}/a/_/.v1.work/ckpt/step-1", b"resumable")
    try:
        with store.write(["a"], "v1", config={"x": 1}) as out:
            (out.path / "data.txt").write_text("hello")
            (out.path / "sub").mkdir()
            (out.path / "sub" / "more.bin").write_bytes(b"\0" * 1000)
            out.metadata["count"] = 2
            out.keep_work()
            if fail:
                raise RuntimeError("killed")
    except RuntimeError:
        assert fail
    artifact = store.get(["a"], "v1")
    if fail:
        assert artifact is None and fs.exists(f"{root}/a/_/.v1.work/ckpt/step-1")  # kept for the retry
        return
    assert artifact.url == f"{gcs_root}/a/_/v1" and artifact.metadata == {"count": 2}
    names = [f["name"] for f in artifact.manifest["files"]]
    assert names == ["ckpt/step-1", "data.txt", "sub/more.bin"]  # the leftover is gone, the work kept
    assert not fs.exists(f"{root}/a/_/.v1.work") and not fs.exists(f"{root}/a/_/v1/stale.txt")
    assert artifact.read_bytes("data.txt") == b"hello"
    local = artifact.path  # a verified local copy, made once
    assert local.is_relative_to(tmp_path / "cache") and (local / "sub" / "more.bin").stat().st_size == 1000
    assert (local / "ckpt" / "step-1").read_bytes() == b"resumable" and (local / MANIFEST).is_file()
    assert local_copy(artifact.url) == local
    with store.write(["a"], "v2") as out:
        (out.path / "data.txt").write_text("newer")
    assert [a.version for a in store.others(["a"], "v2")] == ["v1"]
    assert store.write_text("_experiments/x.json", "{}") == f"{gcs_root}/_experiments/x.json"
    assert store.read_text("_experiments/x.json") == "{}"


def test_local_copy_rejects_a_file_that_does_not_match_its_manifest(gcs_root, tmp_path, monkeypatch):
    monkeypatch.setenv("MARIN_CACHE_DIR", str(tmp_path / "cache"))
    store = ArtifactStore(gcs_root)
    with store.write(["a"], "v1") as out:
        (out.path / "data.txt").write_text("hello")
    fs, root = fsspec.url_to_fs(gcs_root)
    fs.pipe_file(f"{root}/a/_/v1/data.txt", b"HELLO")  # same size, other bytes
    with pytest.raises(OSError, match="does not match its manifest"):
        local_copy(f"{gcs_root}/a/_/v1")
    assert not (tmp_path / "cache" / "store").exists() or not any((tmp_path / "cache" / "store").iterdir())


def test_write_stage_keeps_removed_documents_with_reason(tmp_path):
    docs = [({"id": "a", "text": "x"}, None), ({"id": "b", "text": "y"}, "too_short"), ({"id": "c"}, "empty")]
    funnel = write_stage(iter(docs), tmp_path, shard_size=1)
    assert funnel.as_dict() == {"docs_in": 3, "docs_out": 1, "removed": {"empty": 1, "too_short": 1}}
    assert funnel.conserved
    assert [d["id"] for d in read_documents(tmp_path)] == ["a"]
    removed = list(read_documents(tmp_path, prefix="removed"))
    assert [(d["id"], d["reason"]) for d in removed] == [("b", "too_short"), ("c", "empty")]
    assert Funnel.from_dict(json.loads(json.dumps(funnel.as_dict()))) == funnel


def test_staging_of_dead_writers_is_swept_and_a_finished_write_leaves_none(tmp_path, monkeypatch):
    """A writer to a bucket stages in the local cache; one killed mid-write (its ``finally`` never ran)
    leaves its folder, which the next writer on this machine removes, and never a live writer's."""
    import os
    import socket
    import subprocess
    import sys
    import time

    from marin_pipelines.store import OWNER, UNOWNED_DAYS, _staging

    monkeypatch.setenv("MARIN_CACHE_DIR", str(tmp_path / "cache"))
    staging = tmp_path / "cache" / "staging"
    staging.mkdir(parents=True)
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    owners = {"dead": int(gone.stdout), "live": os.getpid()}
    for name, pid in owners.items():
        (staging / name).mkdir()
        (staging / f"{name}{OWNER}").write_text(f"{socket.gethostname()} {pid}")
    (staging / "elsewhere").mkdir()
    (staging / f"elsewhere{OWNER}").write_text(f"another-host {owners['dead']}")  # a shared cache: left
    for name, age in (("unowned_old", UNOWNED_DAYS + 1), ("unowned_new", 0)):
        (staging / name).mkdir()
        then = time.time() - age * 86400
        os.utime(staging / name, (then, then))
    new = _staging("v1")
    left = {p.name for p in staging.iterdir() if p.is_dir()}
    assert left == {"live", "elsewhere", "unowned_new", new.name}
    assert not (staging / f"dead{OWNER}").exists() and (new.parent / f"{new.name}{OWNER}").exists()

    store = ArtifactStore("memory://bucket/store")  # not local: staged in the cache, then put
    with store.write(["a", "step"], "v2") as out:
        (out.path / "data.txt").write_text("x")
    assert store.get(["a", "step"], "v2") is not None
    assert {p.name for p in staging.iterdir()} == {
        "live",
        f"live{OWNER}",
        "elsewhere",
        f"elsewhere{OWNER}",
        "unowned_new",
        new.name,
        f"{new.name}{OWNER}",
    }
