"""Raw data in: WARC/ARC crawls read into document shards, existing corpora and text files as the same
shards, and the embedded demo crawl (no Dagster).
"""
