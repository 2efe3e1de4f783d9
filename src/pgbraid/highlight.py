"""Highlights: short passages of a hit's own fragment with the matched words marked.

A passage is HTML-escaped text (``&``, ``<`` and ``>`` of the fragment become
entities, and nothing of it is dropped: ``List<String>`` stays) in which each matched word is wrapped in ``<mark>...</mark>``. So a
consumer may put passages into HTML as they are, and the fragment's own markup
cannot inject anything; for plain text, drop the two tags and unescape. Nothing
else in a passage looks like a tag. ``**term**`` was the alternative: Markdown
and reStructuredText fragments (the Godot corpus) hold ``**`` of their own, so
a reader could not tell our marks from theirs.

Passages come from ``ts_headline`` over the fragment's body, parsed in the
fragment's own text-search configuration, so words match as they matched:
fulltext marks its tsquery, bm25 the hit's ``matched_terms`` (lexemes), a
fused hit those of the lexical legs that found it. At most three passages of
about 8-24 words, in text order. A hit whose words matched only in its title or
section heading (fulltext weighs them) has no passage (``[]``). One statement
reads the hits' fragments by id under the search's scope and snapshot: a
passage never holds text from outside the hit's fragment.

On an encrypted pipeline the stored body is sealed: the engine passes each hit's
opened ``page_content`` (``texts``), and ``ts_headline`` parses that parameter in
the fragment's configuration instead. The text is sent for the one statement and
stored nowhere, exactly like the text ``to_tsvector`` reads at ingestion.
"""

from __future__ import annotations

import html
from typing import Any

import psycopg
from psycopg import sql

from . import strategies
from .models import Hit
from .scope import Scope
from .strategies.base import Row

# Private-use characters as ts_headline's marks, removed from the text first, so a
# fragment cannot forge one; they become <mark> tags after escaping. LESS stands in
# for "<" while ts_headline parses: its parser reads "<String>" (Java's List<String>,
# <init>, <b>) as an XML tag and leaves tags out of the passage; given LESS, it
# reads the words inside as words, and the passage gets "<" back, then escaped.
START, STOP, BETWEEN, LESS = "\ue000", "\ue001", "\ue002", "\ue003"
OPTIONS = (f'StartSel="{START}", StopSel="{STOP}", FragmentDelimiter="{BETWEEN}", '
           "MaxFragments=3, MaxWords=24, MinWords=8")

_HEADLINES = """
SELECT w.id, ts_headline(f.ts_config, translate(coalesce(w.body, f.body), %(private)s, %(less)s),
                         w.query::tsquery, %(options)s)
FROM unnest(%(ids)s::bigint[], %(queries)s::text[], %(texts)s::text[]) AS w(id, query, body)
     JOIN pgbraid.fragments f ON f.id = w.id
WHERE {scope}
"""


def lexemes(terms: list[str]) -> str:
    """A tsquery matching any of these lexemes, as they are (no further stemming)."""
    quoted = ("'" + t.replace("\\", "\\\\").replace("'", "''") + "'" for t in terms)
    return " | ".join(quoted)


def query_for(strategy: str, details: dict[str, Any], row: Row) -> str | None:
    """The tsquery (as text) of what a lexical strategy matched in this row, or None."""
    if strategy == "fulltext" and details.get("tokens"):
        return details.get("tsquery")
    if strategy == "bm25" and row.matched_terms:
        return lexemes(list(row.matched_terms))
    return None


def for_hits(conn: psycopg.Connection, scope: Scope, legs: list[Any], hits: tuple[Hit, ...],
             by_document: bool, texts: dict[int, str] | None = None) -> tuple[Hit, ...]:
    """Each hit with the passages of its fragment that the plan's lexical legs (legs.Leg:
    their rows and trace details) matched; a hit none of them found gets (). ``texts``:
    fragment id -> opened text, for an encrypted pipeline."""
    matched: dict[Any, list[str]] = {}
    for leg in legs:
        if leg.entry is None or leg.entry.status != "ran":
            continue
        name = strategies.get(leg.plan.strategy).name
        for row in leg.rows:
            query = query_for(name, leg.entry.details, row)
            if query:
                key = row.document_id if by_document else row.fragment_id
                matched.setdefault(key, []).append(query)
    wanted = {}
    for hit in hits:
        key = hit.document_id if by_document else hit.fragment_id
        queries = dict.fromkeys(matched.get(key, ()))
        if queries:
            wanted[hit.fragment_id] = " | ".join(f"({q})" for q in queries)
    found = passages(conn, scope, wanted, texts)
    return tuple(h.model_copy(update={"highlights": found.get(h.fragment_id, ())}) for h in hits)


def passages(conn: psycopg.Connection, scope: Scope, wanted: dict[int, str],
             texts: dict[int, str] | None = None) -> dict[int, tuple[str, ...]]:
    """Fragment id -> its marked passages, for each (fragment id, tsquery text); the text
    is ``texts[id]`` when given (opened, of a sealed fragment), else the stored body."""
    if not wanted:
        return {}
    where, params = scope.where("f")
    statement = sql.SQL(_HEADLINES).format(scope=where)
    bodies = [(texts or {}).get(fragment) for fragment in wanted]
    rows = conn.execute(statement, {**params, "ids": list(wanted), "queries": list(wanted.values()),
                                    "texts": bodies,
                                    "private": "<" + LESS + START + STOP + BETWEEN,
                                    "less": LESS,
                                    "options": OPTIONS}).fetchall()
    return {fragment: tuple(_marked(text)) for fragment, text in rows}


def _marked(headline: str) -> list[str]:
    """ts_headline's fragments that hold a match, escaped, with <mark> tags."""
    kept = []
    for passage in headline.split(BETWEEN):
        if START in passage:
            text = html.escape(passage.strip().replace(LESS, "<"), quote=False)
            kept.append(text.replace(START, "<mark>").replace(STOP, "</mark>"))
    return kept
