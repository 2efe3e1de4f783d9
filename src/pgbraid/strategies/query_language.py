"""Which text-search configuration tokenizes a query.

A scope whose visible fragments all use one configuration holds no other
stems, so its queries are tokenized in that configuration without language
detection: a query misdetected as German would otherwise be stemmed in
German against an English index, and detection costs 0.4-0.6 ms per query.
The configurations are those of the BM25 partitions the reader may see
(``CONFIGS``, kept by ingestion per partition and configuration, counting
current fragments), never the whole pipeline's: a secret German document must
not change how a public reader's query is tokenized. Each process remembers
which (pipeline, resolved classifications) had a single configuration when
last seen. The statements that tokenize a query also return the current list,
so the first query after a second language arrives (or the last fragment of
one leaves) notices it and runs again with the right configuration.
"""

from __future__ import annotations

from datetime import datetime

from ..ingest.language import detect
from ..pipelines import Pipeline

# The configurations of current fragments in the visible partitions, given
# {partitions}: Scope.partitions("p").
CONFIGS = """
ARRAY(SELECT DISTINCT s.config FROM pgbraid.bm25_partitions p
      JOIN pgbraid.bm25_partition_stats s ON s.pipeline_id = p.pipeline_id AND s.partition_id = p.id
      WHERE {partitions} AND s.fragments > 0 ORDER BY 1)
"""

Key = tuple[int, datetime, tuple[str, ...]]


class QueryLanguages:
    def __init__(self) -> None:
        self._single: dict[Key, str] = {}

    def choose(self, pipeline: Pipeline, classifications: tuple[str, ...], text: str) -> str:
        """The configuration to tokenize text in, before the visible list is known."""
        single = self._single.get((pipeline.id, pipeline.created_at, classifications))
        return single or detect(text, default=pipeline.language)

    def recheck(self, pipeline: Pipeline, classifications: tuple[str, ...], text: str, used: str,
                configs: list[str]) -> str | None:
        """Given the visible configurations: the one to tokenize again in, or None if
        ``used`` stands."""
        key = (pipeline.id, pipeline.created_at, classifications)
        if len(configs) == 1:
            self._single[key] = configs[0]
            return configs[0] if configs[0] != used else None
        if self._single.pop(key, None) is not None:
            detected = detect(text, default=pipeline.language)  # used was the single one
            return detected if detected != used else None
        return None


def choose(languages: QueryLanguages | None, pipeline: Pipeline, classifications: tuple[str, ...],
           text: str) -> str:
    if languages is None:
        return detect(text, default=pipeline.language)
    return languages.choose(pipeline, classifications, text)


def recheck(languages: QueryLanguages | None, pipeline: Pipeline, classifications: tuple[str, ...],
            text: str, used: str, configs: list[str] | None) -> str | None:
    """The configuration to tokenize again in, once a statement returned the visible
    configurations; None when ``used`` stands (or nothing is remembered)."""
    if languages is None:
        return None
    return languages.recheck(pipeline, classifications, text, used, configs or [])
