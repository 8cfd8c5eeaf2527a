"""The corpus step over a bucket (the storage emulator): parquet and zstandard JSON lines read from gs://,
shards written to gs://, and each object's generation in the identity, so a rewritten object is a new
version even at the same size."""

import io
import json

import gcsfs
import pyarrow as pa
import pyarrow.parquet as pq
import zstandard

from marin_pipelines.crawl.corpus import CorpusConfig, corpus_identity, write_corpus
from marin_pipelines.documents import list_shards, read_shard


def test_a_corpus_in_a_bucket(gcs_root):
    fs = gcsfs.GCSFileSystem(skip_instance_cache=True)
    root = gcs_root.removeprefix("gs://")
    texts = [
        f"{name}: {(__import__(name).__doc__ or '').strip()}" for name in ("json", "heapq", "bisect", "shlex")
    ]
    table = io.BytesIO()
    pq.write_table(pa.table({"text": texts[:2], "id": ["a", "b"]}), table)
    fs.pipe_file(f"{root}/in/a.parquet", table.getvalue())
    lines = "".join(json.dumps({"text": t}) + "\n" for t in texts[2:]) + "{broken\n"
    fs.pipe_file(f"{root}/in/b.jsonl.zst", zstandard.ZstdCompressor().compress(lines.encode()))

    config = CorpusConfig(paths=[f"{gcs_root}/in"])
    identity = corpus_identity(config)
    assert [row[0] for row in identity] == [f"{gcs_root}/in/a.parquet", f"{gcs_root}/in/b.jsonl.zst"]
    result = write_corpus(config, f"{gcs_root}/out")
    assert result.funnel.as_dict() == {"docs_in": 5, "docs_out": 4, "removed": {"undecodable_line": 1}}
    assert result.places == {"undecodable_line": [f"{gcs_root}/in/b.jsonl.zst line 3"]}
    shards = list_shards(f"{gcs_root}/out")
    assert [doc["text"] for shard in shards for doc in read_shard(shard)] == texts

    fs.pipe_file(f"{root}/in/a.parquet", table.getvalue())  # the same bytes, a new object generation
    assert corpus_identity(config) != identity and corpus_identity(config) == corpus_identity(config)
