"""The Datashop annotator as a Dagster resource: where the chat endpoint is and how hard to push it.

The experiment says who labels (``datashop.annotator``: ``similarity`` or a model name), so that the
labels' version changes with the labeller; this resource says how to reach that model. The API key is
read from the environment variable this resource names, at run time, and goes nowhere else.
"""

import os
from pathlib import Path

from dagster import ConfigurableResource, ResourceDependency
from pydantic import Field

from marin_pipelines.quality.annotation import (
    SIMILARITY,
    Annotator,
    AnswerCache,
    ChatAnnotator,
    ChatSettings,
    DatashopConfig,
    SimilarityAnnotator,
)
from marin_pipelines.resources.store import ArtifactStoreResource
from marin_pipelines.store import cache_dir

CACHE_FILE = "_annotations/chat-answers.sqlite"


class AnnotatorResource(ConfigurableResource):
    """Labels Datashop samples: an OpenAI-compatible chat endpoint, or the embedded SimilarityAnnotator.

    The SimilarityAnnotator (the default, when the experiment names ``similarity``) is no language
    model: it labels by TF-IDF similarity to the experiment's example documents.
    """

    store: ResourceDependency[ArtifactStoreResource]
    base_url: str | None = Field(
        default_factory=lambda: os.environ.get("MARIN_ANNOTATOR_BASE_URL"),
        description="OpenAI-compatible API root, e.g. http://localhost:8000/v1 (vLLM) or "
        "https://api.openai.com/v1; default $MARIN_ANNOTATOR_BASE_URL",
    )
    api_key_env: str | None = Field(
        "MARIN_ANNOTATOR_API_KEY",
        description="name of the environment variable holding the API key (the key itself is never "
        "configured, logged or cached); null for an endpoint without auth",
    )
    max_concurrency: int = Field(8, ge=1, le=256, description="requests in flight at once")
    requests_per_second: float = Field(5.0, gt=0, description="request starts per second, all threads")
    timeout_s: float = Field(60.0, gt=0, description="per request; a timeout is retried")
    max_retries: int = Field(5, ge=0, le=20, description="retries of a 429 / 5xx / timeout before dropping")
    backoff_s: float = Field(1.0, ge=0, description="first retry delay, doubled each retry, plus jitter")
    cache_path: str | None = Field(
        None, description=f"sqlite file of answers already paid for; default {{store root}}/{CACHE_FILE}"
    )

    def annotator(self, config: DatashopConfig) -> Annotator:
        if config.annotator == SIMILARITY:
            return SimilarityAnnotator(config.examples)
        if not self.base_url:
            raise ValueError(
                f"datashop.annotator asks model {config.annotator!r}, but the annotator resource has no "
                "base_url: set MARIN_ANNOTATOR_BASE_URL (or the resource's base_url) to an "
                "OpenAI-compatible endpoint"
            )
        api_key = None
        if self.api_key_env:
            api_key = os.environ.get(self.api_key_env)
            if not api_key:
                raise ValueError(
                    f"the annotator's API key is read from ${self.api_key_env}, which is not set; set it, "
                    "or set the resource's api_key_env to null for an endpoint without auth"
                )
        settings = ChatSettings(
            base_url=self.base_url,
            model=config.annotator,
            max_concurrency=self.max_concurrency,
            requests_per_second=self.requests_per_second,
            timeout_s=self.timeout_s,
            max_retries=self.max_retries,
            backoff_s=self.backoff_s,
        )
        cache = AnswerCache(Path(self.cache_path) if self.cache_path else self._default_cache())
        return ChatAnnotator(settings, config, cache, api_key, seed=config.seed)

    def _default_cache(self) -> Path:
        """Beside the store on a local folder; on a bucket (sqlite needs a local file) in the local cache."""
        store = self.store.store()
        return (Path(store.root) if store.local else cache_dir()) / CACHE_FILE
