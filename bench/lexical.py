"""Lexical strategies side by side: relevance on SciFact, latency at 5k and ~100k fragments.

Peers run in the same process: bm25s (in memory, fed pgbraid's own tokens so
the scores are comparable, and with its own tokenizer), tantivy (en_stem), and
PostgreSQL's native full-text search with AND (`websearch_to_tsquery`) and OR
tsqueries ranked by `ts_rank_cd`.
"""

from __future__ import annotations

import random
import re

import bm25s
import numpy as np
import tantivy

from pgbraid.evaluation import evaluate, read_qrels
from pgbraid.ingest.tokens import expand_code

from . import plots
from .common import DATA, console, connect, has_pipeline, percentiles, read_jsonl, table, timed

SCIFACT = "bench-scifact"
BIG = "bench-100k"
TARGET_FRAGMENTS = 100_000

_NATIVE = """
SELECT d.external_id, ts_rank_cd(f.tsv, q, 1) AS score
FROM pgbraid.fragments f JOIN pgbraid.documents d ON d.id = f.document_id,
     {query} AS q
WHERE f.pipeline_id = %(p)s::bigint AND f.current AND NOT f.quarantined AND f.tsv @@ q
ORDER BY score DESC LIMIT %(k)s
"""
NATIVE_AND = _NATIVE.format(query="websearch_to_tsquery('english', %(q)s)")
NATIVE_OR = _NATIVE.format(query="to_tsquery('english', %(q)s)")


# -- corpora ------------------------------------------------------------------

def scifact_docs() -> list[dict]:
    return list(read_jsonl(DATA / "beir_scifact" / "corpus.jsonl.gz"))


def ensure_scifact(client) -> str:
    if not has_pipeline(client, SCIFACT):
        # One fragment per abstract, so fragment scores are document scores.
        client.create_pipeline(SCIFACT, chunk_size=20_000, embedder="none")
        report = client.ingest(SCIFACT, [{"id": d["_id"], "title": d["title"], "text": d["text"]}
                                         for d in scifact_docs()])
        console.print(f"ingested SciFact: {report.added} documents, {report.fragments} fragments")
    return SCIFACT


def ensure_big(client) -> str:
    if has_pipeline(client, BIG):
        return BIG
    client.create_pipeline(BIG, embedder="none")
    rng = random.Random(7)
    report = client.ingest(BIG, [DATA / "godot_docs" / "godot_docs_rst.jsonl.gz"],
                           fields=_fields(id="path"))
    total = report.fragments
    for name in ("cranfield", "cisi"):
        total += client.ingest(BIG, [DATA / name / "corpus.jsonl.gz"], fields=_fields(id="_id")).fragments
    docs = scifact_docs()
    copy = 0
    while total < TARGET_FRAGMENTS:
        batch = []
        for d in docs:
            sentences = list(d.get("metadata", {}).get("sentences") or [d["text"]])
            if copy:
                rng.shuffle(sentences)
            batch.append({"id": f"{d['_id']}~{copy}", "title": d["title"], "text": " ".join(sentences)})
        total += client.ingest(BIG, batch).fragments
        copy += 1
        console.print(f"  big corpus: {total} fragments after SciFact copy {copy}")
    return BIG


def _fields(**kw):
    from pgbraid import FieldMap

    return FieldMap(**kw)


def code_chunks(count: int = 50, tokens: int = 30) -> list[str]:
    """30-token windows of GDScript from the Godot docs' code tabs."""
    chunks = []
    for page in read_jsonl(DATA / "godot_docs" / "godot_docs_rst.jsonl.gz"):
        for block in re.findall(r"code-tab:: gdscript[^\n]*\n\n((?:[ \t]+[^\n]*\n|\n)+)", page["text"]):
            words = block.split()
            if len(words) >= tokens:
                chunks.append(" ".join(words[:tokens]))
    rng = random.Random(3)
    rng.shuffle(chunks)
    return chunks[:count]


def scifact_queries() -> tuple[list[tuple[str, str]], dict]:
    qrels = read_qrels(DATA / "beir_scifact" / "qrels" / "test.tsv")
    queries = [(q["_id"], q["text"]) for q in read_jsonl(DATA / "beir_scifact" / "queries.jsonl")
               if q["_id"] in qrels]
    return queries, qrels


# -- peers --------------------------------------------------------------------

class Peers:
    """bm25s and tantivy over exactly the pipeline's current fragments."""

    def __init__(self, client, pipeline: str):
        with client.session() as conn:
            rows = conn.execute(
                "SELECT d.external_id, f.bm25_terms, f.bm25_tfs, coalesce(f.title, '') || ' ' || f.body"
                " FROM pgbraid.fragments f JOIN pgbraid.documents d ON d.id = f.document_id"
                " JOIN pgbraid.pipelines p ON p.id = f.pipeline_id"
                " WHERE p.name = %s AND f.current ORDER BY f.bm25_ordinal", (pipeline,)).fetchall()
        self.doc_ids = [r[0] for r in rows]
        tokens = [[t for t, n in zip(terms, tfs) for _ in range(n)] for _, terms, tfs, _ in rows]
        self.same_tokens = bm25s.BM25(k1=0.9, b=0.4, method="lucene")
        self.same_tokens.index(tokens, show_progress=False)
        texts = [r[3] for r in rows]
        import Stemmer

        self.stemmer = Stemmer.Stemmer("english")
        self.own = bm25s.BM25()  # bm25s defaults: lucene, k1=1.5, b=0.75
        self.own.index(bm25s.tokenize(texts, stopwords="en", stemmer=self.stemmer,
                                      show_progress=False), show_progress=False)
        builder = tantivy.SchemaBuilder()
        builder.add_text_field("body", stored=False, tokenizer_name="en_stem")
        builder.add_integer_field("row", stored=True, indexed=False)
        self.tantivy = tantivy.Index(builder.build())
        writer = self.tantivy.writer(heap_size=200_000_000, num_threads=1)
        for i, text in enumerate(texts):
            writer.add_document(tantivy.Document(body=text, row=i))
        writer.commit()
        writer.wait_merging_threads()
        self.tantivy.reload()
        self.searcher = self.tantivy.searcher()

    def bm25s_same(self, tokens: list[str], k: int) -> list[tuple[str, float]]:
        scores = self.same_tokens.get_scores(tokens)
        return self._top(scores, k)

    def bm25s_own(self, text: str, k: int) -> list[tuple[str, float]]:
        query = bm25s.tokenize([text], stopwords="en", stemmer=self.stemmer, show_progress=False)
        docs, scores = self.own.retrieve(query, k=min(k, len(self.doc_ids)), show_progress=False)
        return [(self.doc_ids[i], float(s)) for i, s in zip(docs[0], scores[0])]

    def tantivy_search(self, text: str, k: int) -> list[tuple[str, float]]:
        cleaned = re.sub(r"[^\w\s]", " ", text)
        query = self.tantivy.parse_query(cleaned, ["body"])
        return [(self.doc_ids[self.searcher.doc(a)["row"][0]], s)
                for s, a in self.searcher.search(query, k).hits]

    def _top(self, scores: np.ndarray, k: int) -> list[tuple[str, float]]:
        top = np.argpartition(-scores, min(k, len(scores) - 1))[:k]
        top = top[np.argsort(-scores[top])]
        return [(self.doc_ids[i], float(scores[i])) for i in top if scores[i] > 0]


def query_tokens(client, text: str) -> list[str]:
    with client.session() as conn:
        return [lex for lex, n in conn.execute(
            "SELECT lexeme, array_length(positions, 1) FROM unnest(to_tsvector('english', %s))",
            (expand_code(text),)) for _ in range(n)]


def or_query(client, text: str) -> str:
    with client.session() as conn:
        lexemes = [r[0] for r in conn.execute(
            "SELECT lexeme FROM unnest(to_tsvector('english', %s))", (text,))]
    return " | ".join("'" + t.replace("'", "''") + "'" for t in lexemes) or "''"


def native(client, pipeline_id: int, statement: str, text: str, k: int) -> list[tuple[str, float]]:
    with client.session() as conn:
        return conn.execute(statement, {"p": pipeline_id, "q": text, "k": k}).fetchall()


def pipeline_id(client, name: str) -> int:
    with client.session() as conn:
        return conn.execute("SELECT id FROM pgbraid.pipelines WHERE name = %s", (name,)).fetchone()[0]


# -- relevance ----------------------------------------------------------------

def relevance(client, peers: Peers) -> None:
    queries, qrels = scifact_queries()
    pid = pipeline_id(client, SCIFACT)
    systems = {
        "pgbraid fulltext (AND, ts_rank_cd)": lambda q: [
            (h.document_id, h.score) for h in client.search(SCIFACT, q, params={"k": 100}).hits],
        "native OR + ts_rank_cd": lambda q: native(client, pid, NATIVE_OR, or_query(client, q), 100),
        "pgbraid bm25 (k1 0.9, b 0.4; default)": lambda q: [
            (h.document_id, h.score) for h in client.search(SCIFACT, q, type="bm25", params={"k": 100}).hits],
        "pgbraid bm25 (k1 1.2, b 0.75)": lambda q: [
            (h.document_id, h.score) for h in client.search(
                SCIFACT, q, type="bm25", params={"k": 100, "k1": 1.2, "b": 0.75}).hits],
        "bm25s, pgbraid's tokens (0.9, 0.4)": lambda q: peers.bm25s_same(query_tokens(client, q), 100),
        "bm25s, own tokenizer (1.5, 0.75)": lambda q: peers.bm25s_own(q, 100),
        "tantivy (en_stem, 1.2, 0.75)": lambda q: peers.tantivy_search(q, 100),
    }
    rows = []
    for name, search in systems.items():
        run = {}
        for qid, text in queries:
            hits = search(text)
            run[qid] = {doc: float(len(hits) - i) for i, (doc, _) in enumerate(hits)}
        m = evaluate(qrels, run)
        rows.append([name, m["nDCG@10"], m["R@100"], m["RR@10"]])
    table("SciFact test (300 queries, 5,183 abstracts): relevance",
          ["system", "nDCG@10", "R@100", "RR@10"], rows)
    plots.save("lexical", "relevance", {name: {"nDCG@10": n, "R@100": r, "RR@10": rr}
                                        for name, n, r, rr in rows})


# -- speed --------------------------------------------------------------------

def speed(client, pipeline: str, peers: Peers, label: str) -> None:
    pid = pipeline_id(client, pipeline)
    measured = {}
    queries, _ = scifact_queries()
    sets = {"SciFact queries": [t for _, t in queries], "30-token code chunks": code_chunks()}
    uncached = connect(postings_cache_mb=0)  # every posting list read from PostgreSQL
    for set_name, texts in sets.items():
        prepared = [(t, query_tokens(client, t), or_query(client, t)) for t in texts]
        systems = {
            "bm25s (in memory)": lambda t, toks, orq: peers.bm25s_same(toks, 10),
            "tantivy (in memory)": lambda t, toks, orq: peers.tantivy_search(t, 10),
            "pgbraid bm25": lambda t, toks, orq: client.search(pipeline, t, type="bm25", params={"k": 10}),
            "pgbraid bm25, posting cache off": lambda t, toks, orq: uncached.search(
                pipeline, t, type="bm25", params={"k": 10}),
            "pgbraid bm25, pruning maxscore": lambda t, toks, orq: client.search(
                pipeline, t, type="bm25", params={"k": 10, "pruning": "maxscore"}),
            "native AND ts_rank_cd": lambda t, toks, orq: native(client, pid, NATIVE_AND, t, 10),
            "native OR ts_rank_cd": lambda t, toks, orq: native(client, pid, NATIVE_OR, orq, 10),
        }
        results = {}
        for name, search in systems.items():
            # Warm caches and prepared statements; pgbraid bm25 gets a whole untimed
            # pass, so its posting cache is in the steady state of a running service
            # (as bm25s and tantivy hold their whole index in memory). The row with
            # the cache off shows the other extreme.
            for t, toks, orq in (prepared if name == "pgbraid bm25" else prepared[:5]):
                search(t, toks, orq)
            samples = [timed(lambda t=t, toks=toks, orq=orq: search(t, toks, orq))
                       for t, toks, orq in prepared]
            results[name] = percentiles(samples)
        measured[set_name] = {n: {"p50": p50, "p95": p95} for n, (p50, p95) in results.items()}
        base = results["bm25s (in memory)"][0]
        table(f"{label}: {set_name} ({len(prepared)}), latency in ms, one client thread",
              ["system", "p50", "p95", "p50 / bm25s"],
              [[n, p50, p95, p50 / base] for n, (p50, p95) in results.items()])
        exact = sum(_same_top(client, pipeline, peers, t, toks) for t, toks, _ in prepared)
        console.print(f"  pgbraid bm25 top-10 identical to bm25s on the same tokens: "
                      f"{exact}/{len(prepared)} queries")
    fragments = current_fragments(client, pipeline)
    plots.save("lexical", f"latency/{fragments}", measured, fragments=fragments, label=label)


def pruning(client, pipeline: str, copies: tuple[int, ...] = (1, 4, 10, 40)) -> None:
    """Ranking alone (no SQL): every posting vs MaxScore, on the pipeline's own posting
    lists for each query, tiled ``n`` times (ordinal + i * size) to stand for a corpus
    ``n`` times larger with the same term statistics. The default (every posting)
    rests on this table."""
    from pgbraid.strategies import bm25_topk
    from pgbraid.strategies.bm25_postings import Postings

    captured = []
    original = bm25_topk.Ranking.__init__

    def capture(self, terms, size, dead, impacts, **options):
        captured.append(([(t.name, t.weight, list(t.lists)) for t in terms], size, impacts))
        original(self, terms, size, dead, impacts, **options)

    queries, _ = scifact_queries()
    sets = {"SciFact queries": [t for _, t in queries][:100], "30-token code chunks": code_chunks()}
    rows = []
    for set_name, texts in sets.items():
        captured.clear()
        bm25_topk.Ranking.__init__ = capture
        try:
            for text in texts:
                client.search(pipeline, text, type="bm25", params={"k": 10})
        finally:
            bm25_topk.Ranking.__init__ = original
        for n in copies:
            samples = {"every posting": [], "MaxScore": []}
            postings = []
            for terms, size, impacts in captured:
                tiled = [(name, weight, [_tile(p, size, n, Postings) for p in lists])
                         for name, weight, lists in terms]
                for label, prune in (("every posting", False), ("MaxScore", True)):
                    ranking = bm25_topk.Ranking([bm25_topk.Term(*t) for t in tiled], size * n,
                                                np.zeros(0, dtype=np.int64), impacts,
                                                pruning="maxscore" if prune else "none")
                    samples[label].append(timed(lambda: ranking.top(40)))
                postings.append((ranking.stats.postings, ranking.stats.scored))
            every, maxscore = (percentiles(samples[k]) for k in ("every posting", "MaxScore"))
            total, scored = np.median(np.array(postings), axis=0)
            rows.append([f"{set_name}, lists x{n}", int(total), int(scored), every[0], every[1],
                         maxscore[0], maxscore[1], maxscore[0] / every[0]])
    table(f"Ranking only (top 40, no SQL), {pipeline}'s lists tiled: every posting vs MaxScore",
          ["queries", "postings", "MaxScore scored", "all p50", "all p95", "MaxScore p50",
           "MaxScore p95", "MaxScore / all"], rows)


def _tile(postings, size: int, n: int, cls):
    ordinals = np.concatenate([postings.ordinals.astype(np.int64) + i * size for i in range(n)])
    return cls(ordinals.astype(np.int32), np.tile(postings.tfs, n), np.tile(postings.lengths, n))


def _same_top(client, pipeline, peers, text, tokens) -> bool:
    ours = [h.score for h in client.search(pipeline, text, type="bm25", params={"k": 10}).hits]
    theirs = [s for _, s in peers.bm25s_same(tokens, 10)]
    return len(ours) == len(theirs) and np.allclose(ours, theirs, atol=1e-3)


def run(*, quick: bool = False) -> None:
    with connect() as client:
        ensure_scifact(client)
        peers = Peers(client, SCIFACT)
        relevance(client, peers)
        speed(client, SCIFACT, peers, "SciFact, 5,183 fragments")
        if quick:
            return
        ensure_big(client)
        big = Peers(client, BIG)
        n = current_fragments(client, BIG)
        speed(client, BIG, big, f"{n:,} fragments (SciFact + shuffled copies, Godot, Cranfield, CISI)")
        pruning(client, BIG)


def current_fragments(client, pipeline: str) -> int:
    with client.session() as conn:
        return conn.execute("SELECT count(*) FROM pgbraid.fragments f JOIN pgbraid.pipelines p"
                            " ON p.id = f.pipeline_id WHERE p.name = %s AND f.current",
                            (pipeline,)).fetchone()[0]


def plot(results: dict) -> list:
    """Latency against corpus size per system (p50, one line each), and nDCG@10 per system."""
    drawn = []
    sizes = sorted((entry for key, entry in results.items() if key.startswith("latency/")),
                   key=lambda entry: entry["fragments"])
    if sizes:
        panels: dict = {}
        for entry in sizes:
            for set_name, systems in entry["data"].items():
                for system, figures in systems.items():
                    panels.setdefault(set_name, {}).setdefault(system, []).append(
                        (entry["fragments"], figures["p50"]))
        drawn.append(plots.lines(
            "lexical-latency", "Lexical latency against corpus size (p50 per query, ms)", panels,
            "current fragments in the pipeline", "p50 ms (log)"))
    relevance = plots.data(results, "relevance")
    if relevance:
        drawn.append(plots.bars(
            "lexical-ndcg", "SciFact test, 300 queries: nDCG@10 per system", "nDCG@10",
            {name: m["nDCG@10"] for name, m in relevance.items()}, digits=3))
    return drawn
