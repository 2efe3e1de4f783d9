"""Which text-search configuration tokenizes a query.

A pipeline whose fragments all use one configuration (``bm25_stats.configs``,
kept by ingestion) holds no other stems, so its queries are tokenized in that
configuration without language detection: a query misdetected as German
would otherwise be stemmed in German against an English index, and detection
costs 0.4-0.6 ms per query. Each process remembers which pipelines had a
single configuration when last seen. The statements that tokenize a query
also return the pipeline's current list, so the first query after a second
language arrives notices it and runs again with the detected configuration.
"""

from __future__ import annotations

from datetime import datetime

from ..ingest.language import detect
from ..pipelines import Pipeline


class QueryLanguages:
    def __init__(self) -> None:
        self._single: dict[tuple[int, datetime], str] = {}

    def choose(self, pipeline: Pipeline, text: str) -> str:
        """The configuration to tokenize text in, before the pipeline's list is known."""
        single = self._single.get((pipeline.id, pipeline.created_at))
        return single or detect(text, default=pipeline.language)

    def recheck(self, pipeline: Pipeline, text: str, used: str, configs: list[str]) -> str | None:
        """Given the pipeline's configurations: the one to tokenize again in, or None
        if ``used`` stands."""
        key = (pipeline.id, pipeline.created_at)
        if len(configs) == 1:
            self._single[key] = configs[0]
            return configs[0] if configs[0] != used else None
        if len(configs) > 1 and self._single.pop(key, None) is not None:
            detected = detect(text, default=pipeline.language)  # used was the single one
            return detected if detected != used else None
        return None


def choose(languages: QueryLanguages | None, pipeline: Pipeline, text: str) -> str:
    if languages is None:
        return detect(text, default=pipeline.language)
    return languages.choose(pipeline, text)


def recheck(languages: QueryLanguages | None, pipeline: Pipeline, text: str, used: str,
            configs: list[str] | None) -> str | None:
    """The configuration to tokenize again in, once a statement returned the
    pipeline's configurations; None when ``used`` stands (or nothing is remembered)."""
    if languages is None:
        return None
    return languages.recheck(pipeline, text, used, configs or [])
