"""marin-pipelines: the open lab for foundation models, as Dagster assets over a core library."""

import fsspec.config

# Other processes write the store and the crawl root (run pods, training pods): gcsfs's listing cache
# would hide their writes from a long-lived process for good (the sensor would never see a new snapshot,
# a code server would never see another run's output). Every listing asks the bucket.
for _protocol in ("gs", "gcs"):
    fsspec.config.conf.setdefault(_protocol, {}).setdefault("use_listings_cache", False)
