"""A long-lived process (the code server's sensor) sees what other processes write to the bucket."""

import gcsfs

from marin_pipelines.crawl.snapshots import crawl_snapshots
from marin_pipelines.store import ArtifactStore


def test_a_long_lived_reader_sees_other_writers(gcs_root):
    other = gcsfs.GCSFileSystem(skip_instance_cache=True)  # another process: a client of its own
    root = gcs_root.removeprefix("gs://")
    other.pipe_file(f"{root}/crawl/s1/a.warc.gz", b"x")
    store = ArtifactStore(f"{gcs_root}/store")
    assert crawl_snapshots(f"{gcs_root}/crawl") == ["s1"] and store.get(["a"], "v1") is None

    other.pipe_file(f"{root}/crawl/s2/a.warc.gz", b"x")  # a new snapshot lands
    other.pipe_file(f"{root}/store/a/_/v1/f", b"x")  # a run pod's output, manifest last
    other.pipe_file(f"{root}/store/a/_/v1/manifest.json", b'{"files": [], "metadata": {}}')
    assert crawl_snapshots(f"{gcs_root}/crawl") == ["s1", "s2"]
    assert store.get(["a"], "v1") is not None
