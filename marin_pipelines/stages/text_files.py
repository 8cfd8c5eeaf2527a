"""Files of text as a document stage (``crawl/text_files.py``): what ``marin-pipelines forecast --text``
tokenizes. Its output has the document stages' layout and funnel (documents read, kept, files left out
per reason), so the tokenizer and the token cache read it as they read curated text."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from marin_pipelines.crawl.text_files import find_text, text_documents
from marin_pipelines.documents import write_stage
from marin_pipelines.stages.crawl import FUNNEL, NoDocuments
from marin_pipelines.steps import StepContext, stage
from marin_pipelines.store import PendingArtifact


class TextFilesConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    paths: list[str] = Field(min_length=1, description="files and folders of text (local paths)")


def text_identity(config: TextFilesConfig) -> Any:
    """Every file's path, size and modification time: other files, or a changed one, are a new version."""
    try:
        return find_text(config.paths).identity()
    except (FileNotFoundError, ValueError) as e:
        return {"missing": str(e)}  # the step raises the clear error when it runs


@stage(TextFilesConfig, kinds=("parquet",), checks=FUNNEL, fingerprint=text_identity)
def text_files(ctx: StepContext, out: PendingArtifact, config: TextFilesConfig) -> None:
    """Documents from files of text: each .jsonl line and .parquet row, and every other file as one."""
    text = find_text(config.paths)
    funnel = write_stage(text_documents(text), out.path)
    if funnel.removed:
        ctx.log(f"{ctx.step.name}: files left out: {dict(funnel.removed)} (removed-*.parquet names them)")
    if not funnel.docs_out:
        raise NoDocuments(f"{ctx.step.name}: no document in {config.paths}: {dict(funnel.removed)}")
    out.metadata.update(
        funnel=funnel.as_dict(), collections=len(text.collections), plain_files=len(text.plain)
    )
