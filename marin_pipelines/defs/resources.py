"""The resources every step asset may use: the store (and its IO manager), the annotator, the launcher."""

from dagster import Definitions, definitions

from marin_pipelines.resources import default_resources


@definitions
def resources() -> Definitions:
    return Definitions(resources=default_resources())
