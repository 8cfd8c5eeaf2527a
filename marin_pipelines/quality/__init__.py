"""Which documents to keep: LM-labelled examples (Datashop), the fastText classifier that scores every
document, and curation by threshold or top fraction (no Dagster).
"""
