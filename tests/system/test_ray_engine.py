"""The data stages on a real Ray cluster (a head and a worker node, separate processes on this machine):
the same bytes and funnels as the local process pool, a worker node lost mid-stage, the command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from dagster import DagsterInstance, materialize
from ray_cluster import ENV, LocalCluster

from marin_pipelines.crawl.demo_crawl import DemoCrawlConfig, build_demo_crawl
from marin_pipelines.crawl.web_documents import WebDocumentsConfig, find_warc_files, write_web_documents
from marin_pipelines.defs.automation import selection
from marin_pipelines.defs.experiments_component import experiment_definitions
from marin_pipelines.defs.step_assets import snapshot_partitions
from marin_pipelines.engine import LocalEngine, RayEngine
from marin_pipelines.experiment import Experiment
from marin_pipelines.experiments.defaults import crawl_and_text
from marin_pipelines.process_crawl import process_crawl
from marin_pipelines.resources import default_resources
from marin_pipelines.resources.engine import LocalEngineResource, RayCluster
from marin_pipelines.store import ArtifactStore

CONFIGS = {"web_documents": WebDocumentsConfig(shard_docs=40)}


@pytest.fixture(autouse=True)
def _driver_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[LocalCluster]:
    os.environ.update(ENV)  # module scope: the driver's settings before the first connection
    cluster = LocalCluster()
    yield cluster
    cluster.stop()


@pytest.fixture(scope="module")
def warc_files(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    folder = tmp_path_factory.mktemp("crawl")
    build_demo_crawl(folder, DemoCrawlConfig(n_files=6))
    return [Path(p) for p in find_warc_files(folder)]


def outputs(root: Path) -> dict[str, bytes]:
    """Every output file of a store but the manifests (they hold times and run ids), the records and the
    version index (they hold the store's own urls)."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != "manifest.json" and not {"_experiments", "_versions"} & set(p.parts)
    }


def test_a_crawl_on_ray_gives_the_local_bytes_and_funnels(ray_cluster, warc_files, tmp_path):
    local = process_crawl(warc_files, tmp_path / "local", engine=LocalEngine(2), configs=CONFIGS)
    told: list[str] = []
    on_ray = process_crawl(
        warc_files,
        tmp_path / "ray",
        engine=RayEngine(ray_cluster.address),
        configs=CONFIGS,
        progress=told.append,
    )
    assert on_ray == local
    assert outputs(tmp_path / "ray") == outputs(tmp_path / "local")
    assert all(f["docs_in"] == f["docs_out"] + sum(f["removed"].values()) for f in local.values())
    assert local["deduplicated_text"]["docs_out"] > 0
    assert any("WARC files 6/6 done" in line for line in told), told


def test_a_worker_node_lost_mid_stage_costs_a_retry_not_a_document(warc_files, tmp_path):
    """Every process of the worker node is killed while it runs a unit; Ray retries it on the head."""
    expected = write_web_documents(warc_files, tmp_path / "local", WebDocumentsConfig(shard_docs=40))
    import ray

    cluster = LocalCluster()  # its own: this test destroys the worker node
    try:
        ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)  # RayEngine reuses it
        cluster.warm_worker_node("marin_pipelines.crawl.web_documents")
        killed = threading.Event()

        def kill_when_busy() -> None:
            deadline = time.time() + 60
            while time.time() < deadline and not killed.is_set():
                if cluster.worker.busy():
                    cluster.worker.kill()
                    killed.set()
                time.sleep(0.01)

        killer = threading.Thread(target=kill_when_busy)
        killer.start()
        got = write_web_documents(
            warc_files, tmp_path / "ray", WebDocumentsConfig(shard_docs=40), RayEngine(cluster.address)
        )
        killer.join()
    finally:
        ray.shutdown()
        cluster.stop()
    assert killed.is_set(), "the worker node never ran a unit"
    assert got[0] == expected[0] and got[0].conserved
    assert got[1].as_dict() == expected[1].as_dict()
    assert outputs(tmp_path / "ray") == outputs(tmp_path / "local")


def test_the_command_line_runs_on_a_named_cluster(ray_cluster, warc_files, tmp_path):
    cli = str(Path(sys.executable).parent / "marin-pipelines")
    command = [cli, "process-crawl", "--warc", *map(str, warc_files)]
    runs = {}
    for name, flags in {
        "local": ["--engine", "local", "--workers", "2"],
        "ray": ["--engine", "ray", "--ray-address", ray_cluster.address],
    }.items():
        done = subprocess.run(
            [*command, "--out", str(tmp_path / name), *flags], capture_output=True, text=True, timeout=600
        )
        assert done.returncode == 0, done.stderr
        runs[name] = json.loads(done.stdout.strip().splitlines()[-1])
    assert runs["ray"] == runs["local"]
    assert outputs(tmp_path / "ray") == outputs(tmp_path / "local")


def test_tokenize_encodes_its_chunks_on_the_cluster(ray_cluster, warc_files, tmp_path):
    """``marin-pipelines tokenize --engine ray``: chunks encoded by the cluster's workers, the same cache."""
    text = tmp_path / "text"
    text.mkdir()
    for i in range(6):  # six files: six chunks, spread over both nodes
        lines = [
            json.dumps({"id": f"{i}-{j}", "text": f"document {j} of file {i}: " + "words " * j})
            for j in range(40)
        ]
        (text / f"part-{i}.jsonl").write_text("\n".join(lines) + "\n")
    cli = str(Path(sys.executable).parent / "marin-pipelines")
    caches = {}
    for name, flags in {
        "local": ["--engine", "local", "--workers", "2"],
        "ray": ["--engine", "ray", "--ray-address", ray_cluster.address],
    }.items():
        command = [
            cli,
            "tokenize",
            "--input",
            str(text),
            "--out",
            str(tmp_path / name),
            "--vocab-size",
            "300",
        ]
        done = subprocess.run([*command, *flags], capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout.strip().splitlines()[-1])["documents"] == 240
        caches[name] = {
            str(p.relative_to(tmp_path / name)): p.read_bytes()
            for p in (tmp_path / name).rglob("*")
            if p.is_file()
        }
    assert caches["ray"] == caches["local"] and "train/00005.bin" in caches["ray"]


def test_snapshot_assets_run_their_shards_where_the_resource_says(ray_cluster, warc_files, tmp_path):
    """The engine resource is dagster-ray's (an existing cluster by address): the stages' shards run there,
    their progress reaches the run's event log, and the funnels equal the local engine's."""
    root = tmp_path / "crawl" / "s1"
    root.mkdir(parents=True)
    for path in warc_files:
        (root / path.name).write_bytes(path.read_bytes())
    text = crawl_and_text("on_ray", warc_root=str(root.parent), web_documents={"shard_docs": 40})
    experiment = Experiment("on_ray", steps=list(text))
    instance = DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(snapshot_partitions(text.crawl).name, ["s1"])
    funnels = {}
    engines = {"local": LocalEngineResource(workers=2), "ray": RayCluster(address=ray_cluster.address)}
    for name, engine in engines.items():
        store_root = str(tmp_path / name)
        result = materialize(
            experiment_definitions([experiment]).assets,
            selection=selection(text),
            partition_key="s1",
            instance=instance,
            resources={**default_resources(store_root), "engine": engine},
        )
        assert result.success
        store = ArtifactStore(store_root)
        funnels[name] = [store.get(s.key, s.version, "s1").metadata["funnel"] for s in list(text)[1:]]
        logged = [record.user_message for record in instance.all_logs(result.run_id)]
        assert any("on_ray/extracted_text: shards" in m and "done" in m for m in logged), logged
    assert funnels["ray"] == funnels["local"]
    assert outputs(tmp_path / "ray") == outputs(tmp_path / "local")


def test_a_corpus_and_its_decontamination_on_ray_give_the_local_bytes(ray_cluster, tmp_path):
    """Existing-corpus files (parquet and gzipped JSON lines) read into shards, then decontaminated, by the
    cluster's workers: the same files and funnels as on local processes."""
    import gzip

    import pyarrow as pa
    import pyarrow.parquet as pq

    from marin_pipelines.crawl.corpus import CorpusConfig, write_corpus
    from marin_pipelines.documents import run_stage
    from marin_pipelines.text.decontaminated_text import (
        DecontaminationConfig,
        EvalItem,
        NgramIndex,
        decontaminate,
    )

    item = "the quick brown fox jumps over the lazy dog near the quiet river bank today"
    rows = [
        {"id": f"d{i}", "text": f"document {i} " + "words " * (i % 7) + (item if i % 9 == 0 else "")}
        for i in range(90)
    ]
    files = tmp_path / "files"
    files.mkdir()
    pq.write_table(pa.Table.from_pylist(rows[:60]), files / "part.parquet", row_group_size=20)
    with gzip.open(files / "part.jsonl.gz", "wt") as f:
        f.writelines(json.dumps(row) + "\n" for row in rows[60:])
    index = NgramIndex([EvalItem("set", "0", item)], DecontaminationConfig())
    made = {}
    for name, engine in (("local", LocalEngine(2)), ("ray", RayEngine(ray_cluster.address))):
        corpus = write_corpus(CorpusConfig(paths=[str(files)]), str(tmp_path / name / "corpus"), engine)
        funnel = run_stage(
            decontaminate, index, str(tmp_path / name / "corpus"), str(tmp_path / name / "clean"), engine
        )
        made[name] = (corpus.funnel.as_dict(), funnel.as_dict(), outputs(tmp_path / name))
    assert made["ray"] == made["local"]
    assert made["local"][1] == {"docs_in": 90, "docs_out": 80, "removed": {"contaminated": 10}}
