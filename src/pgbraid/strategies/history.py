"""What a strategy needs to search the versions valid at ``as_of``.

The indexes that serve current searches are partial on current rows (GIN over
``tsv`` and trigrams, HNSW per distance strategy), and BM25's postings hold
current fragments only. A search ``as_of`` a time is therefore an exact scan of
the pipeline's fragments whose version was valid then (``valid_from <= as_of <
valid_to``, Scope.where), under the same scope as any search: tenant,
classifications, filters, quarantine. Each versioned strategy runs its own
statement over that scope (bm25 ranks the forward index: bm25_history.py);
graph refuses as_of, the graph is not versioned.

A query is tokenized as a search at that time would have been: in the one
text-search configuration the pipeline's fragments in scope used then, or in
the query's detected language when they used several.
"""

from __future__ import annotations

import dataclasses

import psycopg
from psycopg import sql

from ..ingest.language import detect
from ..pipelines import Pipeline
from ..scope import Scope

_CONFIGS = """
SELECT coalesce(array_agg(DISTINCT f.ts_config::text ORDER BY f.ts_config::text), '{{}}')
FROM pgbraid.fragments f WHERE {scope}
"""


def statistics_scope(scope: Scope) -> Scope:
    """The fragments whose statistics a point-in-time search counts: the scope without
    its metadata filter (filters choose hits, not the corpus), as the current
    statistics count a reader's classifications, not its filter."""
    return dataclasses.replace(scope, filters=None)


def configuration(pipeline: Pipeline, text: str, configs: list[str]) -> str:
    """The configuration to tokenize ``text`` in, given the configurations in use."""
    return configs[0] if len(configs) == 1 else detect(text, default=pipeline.language)


def configuration_at(conn: psycopg.Connection, pipeline: Pipeline, scope: Scope,
                     text: str) -> str:
    """The same, with the configurations of the fragments valid at ``scope.as_of``."""
    where, params = statistics_scope(scope).where("f")
    configs = conn.execute(sql.SQL(_CONFIGS).format(scope=where), params).fetchone()[0]
    return configuration(pipeline, text, list(configs))
