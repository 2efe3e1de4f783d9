"""A tenant's own SQL (``Client.session()``, as pgbraid_app under its tenant's row-level
security) cannot reach another tenant's rows through keys, which PostgreSQL checks
without row-level security (migration 048).

Three tenants hold a pipeline of the same name: A attacks B, C is B's twin no one
touches. Every attack is refused with PostgreSQL's own error, and afterwards B's
ingest, search, graph load, delete and listings answer exactly what C's do. The
catalog tests hold every key of the schema to the rule, so a key added later without
the tenant in it fails here the day it is added."""

from __future__ import annotations

import uuid

import psycopg
import pytest
from psycopg import errors

import pgbraid

from .conftest import CITUS

# On a Citus coordinator 048 has no pipeline policies (Citus refuses subqueries in the
# policies of distributed tables) and no column privileges (Citus does not carry them
# to the shards): keys are refused by foreign keys alone, after the unique indexes
# have answered, and explicit ids stay open (README, "What a raw session may and may
# not do").
UNPOLICED = pytest.mark.skipif(CITUS, reason="no pipeline policies on Citus (048)")
UNPRIVILEGED = pytest.mark.skipif(CITUS, reason="no column privileges on Citus (048)")

PIPELINE = "docs"
TEXT = "Kerberos tickets expire after ten hours; renew them with kinit."


def _life_before(client) -> None:
    client.create_pipeline(PIPELINE, embedder="none")
    client.ingest(PIPELINE, [{"id": "d0", "title": "tickets", "text": TEXT}])
    client.load_graph_records(PIPELINE, [("org", "o1", "One", ["d0"]), ("org", "o2", "Two", [])],
                              [("org", "o1", "knows", "org", "o2")])


def _life_after(client) -> dict:
    """What B (or its twin C) sees of its own operations after the attack."""
    seen = {}
    report = client.ingest(PIPELINE, [{"id": "d1", "text": "renew kerberos tickets daily"},
                                      {"id": "d0", "title": "tickets", "text": TEXT + " Or not."},
                                      *({"id": f"n{i}", "text": f"note {i} kinit"}
                                        for i in range(30))])
    seen["ingest"] = (report.added, report.updated, report.unchanged, report.failed)
    seen["graph"] = client.load_graph_records(
        PIPELINE, [("org", f"x{i}", f"X {i}", ["d1"]) for i in range(30)],
        [("org", "o2", "knows", "org", f"x{i}") for i in range(30)])
    seen["summary"] = client.graph_summary(PIPELINE)
    for kind in ("bm25", "fulltext", "fuzzy"):
        hits = client.search(PIPELINE, "kerberos tickets", type=kind).hits
        seen[kind] = [(h.document_id, h.rank, round(h.score, 6)) for h in hits]
    seen["delete"] = client.delete_document(PIPELINE, "d1")["expired_version"]
    seen["versions"] = [(v["version"], v["current"]) for v in client.versions(PIPELINE, "d0")]
    seen["documents"] = [d["document_id"] for d in client.documents(PIPELINE)["documents"]]
    return seen


@pytest.fixture()
def tenants(data_dir, server):
    tag = uuid.uuid4().hex[:8]
    with pgbraid.connect(data_dir=data_dir, tenant=f"a{tag}") as a, \
            pgbraid.connect(data_dir=data_dir, tenant=f"b{tag}") as b, \
            pgbraid.connect(data_dir=data_dir, tenant=f"c{tag}") as c:
        for client in (a, b, c):
            _life_before(client)
        yield a, b, c


def _ids(client) -> dict[str, int]:
    """The victim's ids an attacker would guess (pipeline ids come from one sequence;
    graph names and per-pipeline index names show them in the catalog). One table a
    statement, each routed to the pipeline's shard on Citus."""
    with client.session() as conn:
        p = conn.execute("SELECT id FROM pgbraid.pipelines WHERE name = %s", (PIPELINE,)).fetchone()[0]
        one = {name: f"SELECT {column} FROM pgbraid.{table} WHERE pipeline_id = %s"  # noqa: S608
                     f" ORDER BY 1 LIMIT 1"
               for name, table, column in (
                   ("document", "documents", "id"), ("version", "versions", "id"),
                   ("fragment", "fragments", "id"), ("vertex", "vertices", "id"),
                   ("partition", "bm25_partitions", "id"), ("segment", "bm25_segments", "segment"))}
        return {"pipeline": p, **{name: conn.execute(query, (p,)).fetchone()[0]
                                  for name, query in one.items()}}


# Each attack: (SQL, its parameters from the attacker's own ids `a` and the victim's `b`).
_VERSION = ("INSERT INTO pgbraid.versions (pipeline_id, document_id, version, body, content_hash,"
            " classifications) VALUES (%s, %s, 9, 'x', 'x', '{public}')")
_FRAGMENT = ("INSERT INTO pgbraid.fragments (pipeline_id, document_id, version_id, ordinal, body,"
             " language, ts_config, classifications) VALUES (%s, %s, %s, 99, 'x', 'english',"
             " 'english', '{public}')")
ATTACKS = {
    "document in B's pipeline": (
        "INSERT INTO pgbraid.documents (pipeline_id, external_id) VALUES (%s, 'd1')",
        lambda a, b: (b["pipeline"],)),
    "version of B's document": (_VERSION, lambda a, b: (a["pipeline"], b["document"])),
    "version of B's document in B's pipeline": (_VERSION, lambda a, b: (b["pipeline"], b["document"])),
    "fragment of B's version": (_FRAGMENT, lambda a, b: (a["pipeline"], a["document"], b["version"])),
    "vertex in B's pipeline": (
        "INSERT INTO pgbraid.vertices (pipeline_id, type, key, label) VALUES (%s, 'org', 'x1', 'x')",
        lambda a, b: (b["pipeline"],)),
    "edge to B's vertex": (
        "INSERT INTO pgbraid.edges (pipeline_id, src, type, dst) VALUES (%s, %s, 'knows', %s)",
        lambda a, b: (a["pipeline"], a["vertex"], b["vertex"])),
    "segment of B's partition": (
        "INSERT INTO pgbraid.bm25_segments (pipeline_id, partition_id, segment, tier, fragments,"
        " ordinals) VALUES (%s, %s, 999, 0, 0, '{}')", lambda a, b: (a["pipeline"], b["partition"])),
    "dead row of B's partition": (
        "INSERT INTO pgbraid.bm25_dead (pipeline_id, partition_id, ordinal) VALUES (%s, %s, 999999)",
        lambda a, b: (a["pipeline"], b["partition"])),
    "B's graph name": (
        "INSERT INTO pgbraid.age_graphs (pipeline_id, graph, vertex_label, edge_label)"
        " VALUES (%s, 'pgbraid_p' || %s, 1, 1)", lambda a, b: (a["pipeline"], b["pipeline"])),
    "word of B's vocabulary": (
        "INSERT INTO pgbraid.fuzzy_words (pipeline_id, word) VALUES (%s, 'kerberos')",
        lambda a, b: (b["pipeline"],)),
    "document moved onto B's pipeline": (
        "UPDATE pgbraid.documents SET pipeline_id = %s WHERE pipeline_id = %s",
        lambda a, b: (b["pipeline"], a["pipeline"])),
    "version moved onto B's document": (
        "UPDATE pgbraid.versions SET document_id = %s, pipeline_id = %s WHERE document_id = %s",
        lambda a, b: (b["document"], b["pipeline"], a["document"])),
    "edge moved onto B's vertex": (
        "UPDATE pgbraid.edges SET dst = %s WHERE pipeline_id = %s", lambda a, b: (b["vertex"], a["pipeline"])),
}

# Tables whose ids come from a sequence: an id taken ahead of the sequence would
# collide with another tenant's next insert. (Fragments' are random: only UPDATE.)
ID_TABLES = ("pipelines", "documents", "versions", "vertices", "edges", "bm25_partitions")
_AHEAD = {
    "documents": ("INSERT INTO pgbraid.documents (id, pipeline_id, external_id)"
                  " OVERRIDING SYSTEM VALUE SELECT %s + n, %s, 'ahead' || n"
                  " FROM generate_series(1, 200) n", lambda a: (a["document"], a["pipeline"])),
    "versions": ("INSERT INTO pgbraid.versions (id, pipeline_id, document_id, version, body,"
                 " content_hash, classifications) OVERRIDING SYSTEM VALUE"
                 " SELECT %s + n, %s, %s, 100 + n, 'x', 'x', '{public}' FROM generate_series(1, 200) n",
                 lambda a: (a["version"], a["pipeline"], a["document"])),
    "vertices": ("INSERT INTO pgbraid.vertices (id, pipeline_id, type, key, label)"
                 " OVERRIDING SYSTEM VALUE SELECT %s + n, %s, 'ahead', n::text, 'x'"
                 " FROM generate_series(1, 200) n", lambda a: (a["vertex"], a["pipeline"])),
    "pipelines": ("INSERT INTO pgbraid.pipelines (id, name) OVERRIDING SYSTEM VALUE"
                  " SELECT %s + n, 'ahead' || n FROM generate_series(1, 20) n",
                  lambda a: (a["pipeline"],)),
}


def _attack(attacker, statement: str, params: tuple) -> None:
    with attacker.session() as conn:
        conn.execute(statement, params)


POLICED_ATTACKS = {"word of B's vocabulary", "document moved onto B's pipeline"}


@pytest.mark.parametrize("attack", [pytest.param(a, marks=UNPOLICED) if a in POLICED_ATTACKS else a
                                    for a in sorted(ATTACKS)])
def test_rows_pointing_at_another_tenants_rows_are_refused(tenants, attack):
    a, b, _ = tenants
    statement, params = ATTACKS[attack]
    # (Citus refuses a row's move to another pipeline itself: another shard)
    refused = (errors.ForeignKeyViolation, errors.CheckViolation, errors.InsufficientPrivilege,
               *((errors.FeatureNotSupported,) if CITUS else ()))
    with pytest.raises(refused):
        _attack(a, statement, params(_ids(a), _ids(b)))


# Keys B holds and keys it does not: the refusal must not tell them apart (unique
# indexes are checked before foreign keys, and ON CONFLICT reads the row it meets).
ORACLES = {
    "word": ("INSERT INTO pgbraid.fuzzy_words (pipeline_id, word) VALUES (%(b)s, %(key)s)",
             ("kerberos", "zanzibar"), "42501"),  # the row-level security policy
    "document id": ("INSERT INTO pgbraid.documents (pipeline_id, external_id) VALUES (%(b)s, %(key)s)"
                    " ON CONFLICT (pipeline_id, external_id) DO UPDATE SET quarantined = true",
                    ("d0", "zz"), "42501"),
    "vertex": ("INSERT INTO pgbraid.vertices (pipeline_id, type, key, label)"
               " VALUES (%(b)s, 'org', %(key)s, 'x')", ("o1", "zz"), "42501"),
    "version": ("INSERT INTO pgbraid.versions (pipeline_id, document_id, version, body, content_hash,"
                " classifications) VALUES (%(a)s, %(document)s, %(key)s, 'x', 'x', '{public}')",
                (1, 99), "23503"),  # the foreign key
}


@pytest.mark.parametrize("key", [pytest.param(k, marks=UNPOLICED) if ORACLES[k][2] == "42501" else k
                                 for k in sorted(ORACLES)])
def test_a_refusal_tells_nothing_of_the_other_tenants_keys(tenants, key):
    a, b, _ = tenants
    statement, held, expected = ORACLES[key]
    answers = []
    for value in held:
        with pytest.raises(psycopg.Error) as refused:
            _attack(a, statement, {"a": _ids(a)["pipeline"], "b": _ids(b)["pipeline"],
                                   "document": _ids(b)["document"], "key": value})
        answers.append(refused.value.sqlstate)
    assert answers == [expected, expected], answers


@UNPRIVILEGED
@pytest.mark.parametrize("table", (*ID_TABLES, "fragments"))
def test_explicit_ids_are_refused(tenants, table):
    a, _, _ = tenants
    if table in _AHEAD:
        statement, params = _AHEAD[table]
        with pytest.raises(errors.InsufficientPrivilege, match="permission denied"):
            _attack(a, statement, params(_ids(a)))
    with pytest.raises(errors.InsufficientPrivilege, match="permission denied"):
        _attack(a, f"UPDATE pgbraid.{table} SET id = DEFAULT", ())  # noqa: S608 (a name of ours)


@UNPRIVILEGED
def test_the_victim_answers_as_if_nothing_happened(tenants):
    a, b, c = tenants
    mine, theirs = _ids(a), _ids(b)
    for statement, params in ATTACKS.values():
        try:
            _attack(a, statement, params(mine, theirs))
        except psycopg.Error:
            pass
    for statement, params in _AHEAD.values():
        try:
            _attack(a, statement, params(mine))
        except psycopg.Error:
            pass
    twin = _life_after(c)
    assert twin["ingest"][0] == 31 and twin["bm25"], twin
    assert _life_after(b) == twin
    b.delete_pipeline(PIPELINE)
    assert PIPELINE not in [p.name for p in b.pipelines()]
    b.create_pipeline(PIPELINE, embedder="none")  # and anew, on a fresh id
    assert b.ingest(PIPELINE, [{"id": "d1", "text": TEXT}]).added == 1


@UNPRIVILEGED
def test_no_tenant_reads_the_shared_sequences(tenants, catalog):
    """The sequences every tenant's ids come from tell nothing of the others' writes
    (``last_value`` counted every tenant's documents and versions) and give no id by
    hand; ids still come from them (identity columns; migration 049)."""
    a, b, _ = tenants
    sequences = [r[0] for r in catalog.execute(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = 'pgbraid' AND c.relkind = 'S'").fetchall()]
    assert "documents_id_seq" in sequences
    for name in sequences:
        for statement in (psycopg.sql.SQL("SELECT last_value FROM pgbraid.{}").format(
                              psycopg.sql.Identifier(name)),
                          psycopg.sql.SQL("SELECT nextval({}::regclass)").format(
                              psycopg.sql.Literal(f"pgbraid.{name}"))):
            with pytest.raises(errors.InsufficientPrivilege, match="permission denied"):
                _attack(a, statement, ())
    with a.session() as conn:  # pg_sequences shows last_value to whoever may use one
        assert conn.execute("SELECT count(last_value) FROM pg_sequences"
                            " WHERE schemaname = 'pgbraid'").fetchone()[0] == 0
    assert b.ingest(PIPELINE, [{"id": "fresh", "text": TEXT}]).added == 1


# -- the catalog: every key of the schema --------------------------------------------

_FOREIGN = """
SELECT t.relname, k.conname, r.relname,
       ARRAY(SELECT a.attname::text FROM unnest(k.conkey) u(n) JOIN pg_attribute a
             ON a.attrelid = k.conrelid AND a.attnum = u.n),
       ARRAY(SELECT (a.attname || '=' || b.attname)::text
             FROM unnest(k.conkey, k.confkey) u(n, m)
             JOIN pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = u.n
             JOIN pg_attribute b ON b.attrelid = k.confrelid AND b.attnum = u.m)
FROM pg_constraint k JOIN pg_class t ON t.oid = k.conrelid
JOIN pg_class r ON r.oid = k.confrelid JOIN pg_namespace n ON n.oid = t.relnamespace
WHERE n.nspname = 'pgbraid' AND k.contype = 'f'
"""
_UNIQUE = """
SELECT t.relname, i.relname,
       ARRAY(SELECT a.attname::text FROM unnest(x.indkey) u(n) JOIN pg_attribute a
             ON a.attrelid = x.indrelid AND a.attnum = u.n)
FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid
JOIN pg_namespace n ON n.oid = t.relnamespace
WHERE n.nspname = 'pgbraid' AND x.indisunique AND t.relkind IN ('r', 'p')
  AND t.relname <> 'schema_migrations'
"""
_WITH_PIPELINE = """
SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'pipeline_id' AND NOT a.attisdropped
WHERE n.nspname = 'pgbraid' AND c.relkind IN ('r', 'p')
"""
# Unique keys no tenant can aim at another's: random tokens, and the one key that is
# shared on purpose.
UNGUESSABLE = {
    ("api_keys", "api_keys_pkey"): "64 random bits a key id (apikeys.create)",
    ("api_keys", "api_keys_digest_key"): "SHA-256 of a 256-bit random token",
    ("audit_log", "audit_log_pkey"): "53 random bits (058), drawn by audit.record",
    ("fragments", "fragments_pkey"): "53 random bits (011), drawn client-side when encrypted",
    ("embeddings", "embeddings_pkey"): "a fragment's id: 53 random bits",
    ("age_graphs", "age_graphs_graph_key"): "a CHECK ties graph to pipeline_id (048)",
}
SHARED_ON_PURPOSE = {
    # One tenant per table (012): a tenant that claims a table it may not register
    # (from its raw session) keeps every other tenant from registering it. Known, open.
    ("entity_source_tables", "entity_source_tables_pkey"),
}


@pytest.fixture()
def catalog(superuser):
    return superuser


def _bound_columns(catalog) -> dict[str, set[str]]:
    """Per table, its columns a foreign key ties to a row of the same tenant."""
    bound: dict[str, set[str]] = {}
    for table, _, _, columns, pairs in catalog.execute(_FOREIGN).fetchall():
        if "tenant_id=tenant_id" in pairs:
            bound.setdefault(table, set()).update(set(columns) - {"tenant_id"})
    return bound


def test_every_foreign_key_stays_within_the_tenant_and_the_pipeline(catalog):
    wrong = []
    for table, name, target, columns, pairs in catalog.execute(_FOREIGN).fetchall():
        if "tenant_id=tenant_id" not in pairs:
            wrong.append(f"{table}.{name}: no tenant_id")
        if target != "pipelines" and "pipeline_id" in columns \
                and "pipeline_id=pipeline_id" not in pairs:
            wrong.append(f"{table}.{name}: pipeline_id not matched")
    assert not wrong, wrong


def test_every_pipeline_id_is_bound_to_a_pipeline_of_the_tenant(catalog):
    bound = _bound_columns(catalog)
    tables = [r[0] for r in catalog.execute(_WITH_PIPELINE).fetchall()]
    assert "fragments" in tables
    assert [t for t in tables if "pipeline_id" not in bound.get(t, set())] == []


@UNPRIVILEGED
def test_every_unique_key_holds_the_tenant_or_its_pipeline(catalog):
    """A key holding pipeline_id meets only rows of the writer's pipeline: the policy
    refuses another tenant's pipeline before any index sees the row."""
    policed = {r[0] for r in catalog.execute(
        "SELECT c.relname FROM pg_policy p JOIN pg_class c ON c.oid = p.polrelid"
        " WHERE p.polname = 'pipeline_inserted' AND p.polcmd = 'a' AND NOT p.polpermissive"
        " AND pg_get_expr(p.polwithcheck, p.polrelid) LIKE '%%pgbraid.pipelines%%'")}
    tables = {r[0] for r in catalog.execute(_WITH_PIPELINE).fetchall()}
    updated = {r[0] for r in catalog.execute(
        "SELECT c.relname FROM pg_policy p JOIN pg_class c ON c.oid = p.polrelid"
        " WHERE p.polname = 'pipeline_updated' AND p.polcmd = 'w' AND NOT p.polpermissive")}
    assert tables and policed == tables and updated == tables
    unbound = []
    for table, index, columns in catalog.execute(_UNIQUE).fetchall():
        if (table, index) in UNGUESSABLE or (table, index) in SHARED_ON_PURPOSE:
            continue
        if "tenant_id" in columns or "pipeline_id" in columns:
            continue
        if all(_unchosen(catalog, table, c) for c in columns):
            continue  # ids the application role cannot write (next test)
        unbound.append(f"{table}.{index} {columns}")
    assert not unbound, unbound
    age = catalog.execute("SELECT pg_get_constraintdef(oid) FROM pg_constraint"
                          " WHERE conname = 'age_graphs_graph_check'").fetchone()
    assert age and "pgbraid_p" in age[0]


def _privilege(catalog, table: str, column: str, what: str) -> bool:
    return catalog.execute("SELECT has_column_privilege('pgbraid_app', %s::regclass, %s, %s)",
                           (f"pgbraid.{table}", column, what)).fetchone()[0]


def _unchosen(catalog, table: str, column: str) -> bool:
    return not any(_privilege(catalog, table, column, what) for what in ("INSERT", "UPDATE"))


@UNPRIVILEGED
def test_the_application_role_writes_no_id_of_a_sequence(catalog):
    generated = catalog.execute(
        "SELECT table_name FROM information_schema.columns WHERE table_schema = 'pgbraid'"
        " AND column_name = 'id' AND (is_identity = 'YES' OR column_default IS NOT NULL)"
        " AND table_name <> 'audit_log'").fetchall()
    assert sorted(r[0] for r in generated) == sorted((*ID_TABLES, "fragments"))
    assert [t for t in ID_TABLES if not _unchosen(catalog, t, "id")] == []
    assert not _privilege(catalog, "fragments", "id", "UPDATE")
    # and every other column stays writable: a migration adding one grants it
    ungranted = [f"{t}.{c} {what}" for t in (*ID_TABLES, "fragments") for (c,) in catalog.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0"
        " AND NOT attisdropped AND attname <> 'id'", (f"pgbraid.{t}",)).fetchall()
        for what in ("INSERT", "UPDATE") if not _privilege(catalog, t, c, what)]
    assert ungranted == []


# -- 048 over an existing database ---------------------------------------------------

_LEGACY = (  # a tenant's rows as a build before 048 wrote them (the columns it needs)
    "INSERT INTO pgbraid.pipelines (name, embedder) VALUES ('docs', NULL) RETURNING id",
    "INSERT INTO pgbraid.bm25_stats (pipeline_id) VALUES (%(p)s)",
    "INSERT INTO pgbraid.documents (pipeline_id, external_id, current_version)"
    " VALUES (%(p)s, 'd0', 1) RETURNING id",
    "INSERT INTO pgbraid.versions (pipeline_id, document_id, version, body, content_hash,"
    " classifications) VALUES (%(p)s, %(d)s, 1, 'legacy text', 'h', '{public}')",
    "INSERT INTO pgbraid.vertices (pipeline_id, type, key, label) VALUES (%(p)s, 'org', 'o1', 'One')",
)


def test_048_migrates_a_database_holding_two_tenants(server, superuser):
    from pgbraid.db.migrations import migrate

    name = f"legacy_{uuid.uuid4().hex[:8]}"
    superuser.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(name)))
    dsn = server.status().dsn.replace("dbname=postgres", f"dbname={name}")
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            migrate(conn, until=47)
            for tenant in ("ta", "tb"):
                with conn.transaction():
                    conn.execute("SELECT set_config('pgbraid.tenant', %s, true)", (tenant,))
                    ids = {"p": conn.execute(_LEGACY[0]).fetchone()[0]}
                    conn.execute(_LEGACY[1], ids)
                    ids["d"] = conn.execute(_LEGACY[2], ids).fetchone()[0]
                    for statement in _LEGACY[3:]:
                        conn.execute(statement, ids)
        for tenant in ("ta", "tb"):
            with pgbraid.connect(dsn=dsn, tenant=tenant) as client:  # migrates (048, ...)
                assert [v["version"] for v in client.versions(PIPELINE, "d0")] == [1]
                report = client.ingest(PIPELINE, [{"id": "d0", "text": TEXT}, {"id": "d1", "text": TEXT}])
                assert (report.added, report.updated) == (1, 1)
                assert client.load_graph_records(
                    PIPELINE, [("org", "o1", "One", ["d0"]), ("org", "o2", "Two", [])],
                    [("org", "o1", "knows", "org", "o2")])["edges"] == 1
                assert {h.document_id for h in client.search(PIPELINE, "kinit", type="bm25").hits} \
                    == {"d0", "d1"}
                with pytest.raises(errors.InsufficientPrivilege), client.session() as conn:
                    conn.execute("UPDATE pgbraid.documents SET id = DEFAULT")
        with psycopg.connect(dsn) as conn:
            assert conn.execute("SELECT count(*) FROM pgbraid.schema_migrations WHERE version = 48"
                                ).fetchone()[0] == 1
            assert "tenant_id" in conn.execute(
                "SELECT pg_get_constraintdef(oid) FROM pg_constraint"
                " WHERE conname = 'documents_pipeline_id_fkey'").fetchone()[0]
    finally:
        superuser.execute(psycopg.sql.SQL("DROP DATABASE {} WITH (FORCE)").format(
            psycopg.sql.Identifier(name)))
