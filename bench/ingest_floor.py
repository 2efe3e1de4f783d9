"""The ingestion floor (issue 16): the cheapest way PostgreSQL allows to write SciFact's
rows as pgbraid stores them, paired against a whole ``Client.ingest`` of the same rows.

Per session k: a schema fl_k with index-less copies of pgbraid's tables; COPY of
documents, versions and the raw fragment rows; one INSERT ... SELECT computing the
analysed columns with ingest/fragments._ANALYSE's expressions; fuzzy's dictionary in
one INSERT; the postings as one segment packed by bm25_index; then CREATE INDEX for
every index pgbraid keeps on those tables, and ANALYZE. What is left of a fragment's
CPU here is what no ingestion design on these tables can avoid.

  python -m bench.ingest_floor floor SESSIONS WORKERS   the floor alone, per phase
  python -m bench.ingest_floor paired ROUNDS            floor and Client.ingest alternating
(PGBRAID_BENCH_DIR: the bench server; SciFact from ../shared/data.) Written by the
ingest helper of session 9 as a prototype, kept here so the figures can be re-run.
"""
import os, sys, time, statistics, multiprocessing as mp
from psycopg import sql
from psycopg.types.json import Jsonb
from bench.common import connect, has_pipeline
from bench.ingest import records, server_cpu
from bench import bulk
from pgbraid.ingest import bm25_index, fragments as F
from pgbraid import pipelines

TABLES = ["documents", "versions", "fragments", "fuzzy_words", "bm25_postings"]
ANALYSE = """
INSERT INTO {fr} (id, pipeline_id, document_id, version_id, ordinal, section, body, language,
  ts_config, tsv, metadata, classifications, bm25_ordinal, bm25_length, bm25_terms, bm25_tfs,
  title, content_hash, word_set)
SELECT x.id, x.pipeline_id, x.document_id, x.version_id, x.ordinal, x.section, x.body, x.config,
  x.config::regconfig, v.tsv, x.metadata, x.classes, x.bm25_ordinal,
  coalesce(b.length, 0)::int, coalesce(b.terms, '{{}}'), coalesce(b.tfs, '{{}}'), x.title,
  x.content_hash, string_to_array(x.words, ' ')
FROM {stage} x
CROSS JOIN LATERAL (
    SELECT setweight(to_tsvector(x.config::regconfig, coalesce(x.title, '')), 'A')
           || setweight(to_tsvector(x.config::regconfig, coalesce(x.section, '')), 'B')
           || setweight(to_tsvector(x.config::regconfig, x.body), 'C') AS tsv OFFSET 0) v
CROSS JOIN LATERAL (
    SELECT CASE WHEN x.bm25_text IS NULL AND NOT EXISTS (
                    SELECT FROM unnest(v.tsv) u WHERE array_length(u.positions, 1) >= 255)
                THEN v.tsv
                ELSE to_tsvector(x.config::regconfig, coalesce(x.bm25_text, coalesce(x.title, '') || E'\\n' || x.body))
           END AS vector OFFSET 0) w
CROSS JOIN LATERAL (
    SELECT sum(array_length(positions, 1)) AS length,
           array_agg(lexeme ORDER BY lexeme) AS terms,
           array_agg(array_length(positions, 1) ORDER BY lexeme) AS tfs
    FROM unnest(w.vector)) AS b
RETURNING bm25_ordinal, bm25_length, bm25_terms, bm25_tfs
"""

def cpu():  # own process CPU
    t = os.times(); return t.user + t.system

def backend_cpu(pid):
    st = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(st[11]) + int(st[12]) + int(st[13]) + int(st[14])) / os.sysconf("SC_CLK_TCK")

def session(k, rows, workers, out):
    client = connect()
    if not has_pipeline(client, "floor"):
        client.create_pipeline("floor", embedder="none")
    with client._session() as conn:
        pipeline = pipelines.get(conn, "floor")
    t = {}
    from pgbraid.ingest import language
    language._identifier()
    c0 = cpu(); w0 = time.perf_counter()
    batch = bulk.prepared(pipeline, rows)
    t["client prepare (chunk, language, code expansion, words)"] = (cpu() - c0, 0.0, time.perf_counter() - w0)
    with client._db.admin() as conn:
        conn.autocommit = True
        s = sql.Identifier(f"fl_{k}")
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(s))
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(s))
        for tb in TABLES:
            conn.execute(sql.SQL("CREATE TABLE {}.{} (LIKE pgbraid.{} INCLUDING DEFAULTS)").format(
                s, sql.Identifier(tb), sql.Identifier(tb)))
        conn.execute("SELECT set_config('pgbraid.tenant', 'default', false)")
        conn.execute(sql.SQL("SET max_parallel_maintenance_workers = {}").format(sql.Literal(workers)))
        pid = conn.info.backend_pid
        def phase(name, fn):
            c, b, w = cpu(), backend_cpu(pid), time.perf_counter()
            with conn.transaction():
                r = fn()
            t[name] = (cpu() - c, backend_cpu(pid) - b, time.perf_counter() - w)
            return r
        base = (k + 1) * 10_000_000
        pl = pipeline.id
        def docs():
            with conn.cursor().copy(sql.SQL("COPY {}.documents (id, pipeline_id, external_id, current_version) FROM STDIN").format(s)) as cp:
                for i, p in enumerate(batch):
                    cp.write_row((base + i, pl, p.doc.id, 1))
            with conn.cursor().copy(sql.SQL("COPY {}.versions (id, pipeline_id, document_id, version, title, body, content_hash, metadata, classifications, language, source, valid_from) FROM STDIN").format(s)) as cp:
                for i, p in enumerate(batch):
                    cp.write_row((base + i, pl, base + i, 1, p.doc.title, p.doc.text, p.digest,
                                  Jsonb(p.doc.metadata), list(p.classifications),
                                  p.pieces[0].config if p.pieces else pipeline.language, p.doc.source, "now"))
        phase("COPY documents + versions", docs)
        stage = sql.Identifier(f"fl_{k}_stage")
        words = set()
        def raw():
            conn.execute(sql.SQL("CREATE TEMP TABLE {} (id bigint, pipeline_id bigint, document_id bigint, version_id bigint, ordinal int, section text, body text, config text, title text, classes text[], metadata jsonb, bm25_ordinal int, bm25_text text, content_hash text, words text)").format(stage))
            n = 0
            with conn.cursor().copy(sql.SQL("COPY {} FROM STDIN").format(stage)) as cp:
                for i, p in enumerate(batch):
                    cls = list(p.classifications); md = Jsonb(p.doc.metadata)
                    for o, piece in enumerate(p.pieces):
                        cp.write_row((base * 10 + n, pl, base + i, base + i, o, piece.section, piece.text,
                                      piece.config, p.doc.title, cls, md, base + n,
                                      None if F._one_pass(pipeline, p, piece) else piece.bm25_text,
                                      piece.content_hash, piece.words))
                        words.update(piece.words.split())
                        n += 1
            return n
        n = phase("COPY raw fragment rows (temp stage)", raw)
        fr = sql.SQL("{}.fragments").format(s)
        forward = phase("INSERT..SELECT analysis into fragments", lambda: conn.execute(sql.SQL(ANALYSE).format(fr=fr, stage=stage)).fetchall())
        phase("fuzzy_words INSERT", lambda: conn.execute(sql.SQL("INSERT INTO {}.fuzzy_words (pipeline_id, word) SELECT %s, w FROM unnest(%s::text[]) w ORDER BY w").format(s), (pl, sorted(words))))
        def postings():
            pending = bm25_index.Pending()
            for o, length, terms, tfs in forward:
                pending.add(o, length, terms, tfs, config="english", partition=1)
            packed = bm25_index._pack(pending)
            conn.execute(sql.SQL("INSERT INTO {}.bm25_postings (pipeline_id, partition_id, segment, term, postings, ordinals, tfs, lengths) SELECT %(p)s, 1, 1, x.* FROM unnest(%(terms)b::text[], %(counts)b::int[], %(ordinals)b::bytea[], %(tfs)b::bytea[], %(lengths)b::bytea[]) x").format(s), {"p": pl, **packed})
        phase("BM25 postings (pack + INSERT one segment)", postings)
        idx = conn.execute("SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = 'pgbraid' AND tablename = ANY(%s) ORDER BY tablename, indexname", (TABLES,)).fetchall()
        for tb, name, d in idx:
            d = d.replace(f" ON pgbraid.{tb} ", f" ON fl_{k}.{tb} ").replace(f"INDEX {name} ", f"INDEX fl_{k}_{name} ")
            phase(f"CREATE INDEX {name}", lambda d=d: conn.execute(d))
        phase("ANALYZE fragments", lambda: conn.execute(sql.SQL("ANALYZE {}.fragments").format(s)))
        sizes = conn.execute("SELECT relname, pg_relation_size(oid) FROM pg_class WHERE relnamespace = %s::regnamespace AND relkind='i' ORDER BY 2 DESC LIMIT 4", (f"fl_{k}",)).fetchall()
    out.put((k, n, t, sizes))

def run(sessions, workers):
    rows = records()
    parts = [rows[i::sessions] for i in range(sessions)] if sessions > 1 else [rows]
    q = mp.Queue()
    s0, w0 = server_cpu(), time.perf_counter()
    procs = [mp.Process(target=session, args=(k, parts[k], workers, q)) for k in range(sessions)]
    for p in procs: p.start()
    res = [q.get() for _ in procs]
    for p in procs: p.join()
    wall, scpu = time.perf_counter() - w0, server_cpu() - s0
    return res, wall, scpu

def floor_main(sessions: int, workers: int) -> None:
    print("load", os.getloadavg(), "sessions", sessions, "maint workers", workers)
    res, wall, scpu = run(sessions, workers)
    total = sum(r[1] for r in res)
    ccpu = sum(sum(v[0] for v in r[2].values()) for r in res)
    for k, n, t, sizes in res:
        print(f"session {k}: {n} fragments")
        for name, (c, b, w) in t.items():
            print(f"  {name:60s} client {1000*c/n:6.3f}  backend {1000*b/n:6.3f}  wall {w:6.2f}s")
        print("  client sum %.3f backend sum %.3f wall sum %.2f" % tuple(1000*sum(v[i] for v in t.values())/n if i<2 else sum(v[i] for v in t.values()) for i in range(3)))
        print("  biggest indexes", sizes)
    print(f"TOTAL {total} fragments, wall {wall:.2f}s (incl. process start+model load), {total/wall:.0f}/s; client CPU {1000*ccpu/total:.3f} ms/frag, server CPU {1000*scpu/total:.3f} ms/frag; load {os.getloadavg()}")


def steal():
    return int(open("/proc/stat").readline().split()[8])

def ingest_once(c, rows, r):
    name = f"paired-floor-{r}"
    if name in {p.name for p in c.pipelines()}: c.delete_pipeline(name)
    c.create_pipeline(name, embedder="none")
    t0 = os.times(); s0 = server_cpu(); w0 = time.perf_counter()
    rep = c.ingest(name, rows)
    t1 = os.times(); s1 = server_cpu(); w1 = time.perf_counter()
    c.delete_pipeline(name)
    client = (t1.user + t1.system) - (t0.user + t0.system)
    return rep.fragments, client, s1 - s0, w1 - w0

def paired_main(rounds: int) -> None:
    from pgbraid.ingest import language
    rows = records(); c = connect(); language._identifier()
    out = {"floor": [], "ingest": []}
    class W:
        put = staticmethod(lambda x: None)
    session(0, rows, 0, W)  # warm-up, unmeasured (the first measured floor round read 0.04 server CPU-ms)
    for r in range(rounds):
        for side in (("floor", "ingest") if r % 2 == 0 else ("ingest", "floor")):
            st0 = steal(); l0 = os.getloadavg()[0]
            if side == "floor":  # in this process: a forked child's copy-on-write faults inflated its CPU
                box = []
                class Q:
                    put = box.append
                s0, w0, c0 = server_cpu(), time.perf_counter(), os.times()
                session(0, rows, 0, Q)
                scpu, wall = server_cpu() - s0, time.perf_counter() - w0
                c1 = os.times(); ccpu = (c1.user + c1.system) - (c0.user + c0.system)
                n = box[0][1]
                if r == 0:
                    for name, (cc, b, w) in box[0][2].items():
                        if cc + b > 0.005 * n / 1000 * 1000 / 1000: print(f"   {name:58s} client {1000*cc/n:.3f} backend {1000*b/n:.3f}")
            else:
                n, ccpu, scpu, wall = ingest_once(c, rows, r)
            out[side].append((1000 * ccpu / n, 1000 * scpu / n, n / wall))
            print(f"round {r} {side:6s}: client {1000*ccpu/n:.2f} server {1000*scpu/n:.2f} total {1000*(ccpu+scpu)/n:.2f} CPU-ms/frag, {n/wall:.0f}/s, load {l0:.1f}, steal ticks {steal()-st0}", flush=True)
    for side, xs in out.items():
        tot = [a + b for a, b, _ in xs]
        print(f"{side}: total CPU-ms/frag median {statistics.median(tot):.2f} (runs {', '.join(f'{t:.2f}' for t in tot)})")
    ratio = [ (a[0]+a[1]) / (b[0]+b[1]) for a, b in zip(out["floor"], out["ingest"])]
    print("floor/ingest per round:", ", ".join(f"{x:.2f}" for x in ratio), "load", os.getloadavg())


if __name__ == "__main__":
    if sys.argv[1:2] == ["floor"]:
        floor_main(int(sys.argv[2]), int(sys.argv[3]))
    elif sys.argv[1:2] == ["paired"]:
        paired_main(int(sys.argv[2]) if len(sys.argv) > 2 else 3)
    else:
        sys.exit(__doc__)
