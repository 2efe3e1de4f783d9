"""Distributing pgbraid's schema on a Citus coordinator (run by ``migrate`` when the
``citus`` extension is installed; a plain server never gets here).

The migrations are the same on every server; this step comes after them (on a schema
distributed already, after each one) and reads the catalog, so a table a later
migration adds is distributed as soon as that migration has run, with no list to
keep up to date:

- every table of schema ``pgbraid`` with a ``pipeline_id`` column is distributed by
  it, all co-located (one shard group holds all of a pipeline's rows, so a search or
  an ingest of one pipeline is routed to one worker);
- every other table (tenants' pipelines, classifications, keys, sources, the audit
  log) becomes a reference table, copied to every node;
- ``schema_migrations`` stays on the coordinator (nothing but ``migrate`` reads it).

Citus requires a distributed table's primary keys, unique constraints and foreign
keys between distributed tables to include the distribution column. Those that do
not (``fragments.id``, ``versions (document_id, version)``, ...) are rewritten with
``pipeline_id`` first: ids still come from one sequence (or at random) per table,
so they stay unique; the constraint is only checked within the pipeline. A unique
index on expressions or with a predicate cannot be rewritten so: the step refuses
with the table and index named (write it with ``pipeline_id`` in the migration).

What a migration may not do on Citus: add a foreign key from a new table to a
distributed one in the migration that creates the table (Citus refuses a foreign key
from a local table to a distributed one: the migration fails, on the coordinator
only). Create the table in one migration and add the key in the next.

Row-level security: Citus copies each table's policies to its shards, so the tenant
policy is checked on the workers, where the rows are (tests/test_citus.py reads a
shard on a worker as the app role to prove it). The tenant and role reach the
workers because sessions set them with ``SET LOCAL`` and
``citus.propagate_set_commands = 'local'`` (database.py).
"""

from __future__ import annotations

import psycopg
from psycopg import sql

from ..errors import BackendUnavailable

KEY = "pipeline_id"
LOCAL_ONLY = ("schema_migrations",)

_TABLES = """
SELECT c.relname,
       EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = %s
               AND NOT a.attisdropped) AS by_pipeline
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'pgbraid' AND c.relkind IN ('r', 'p') AND NOT c.relispartition
  -- not Citus's yet, or a Citus local table (a local table Citus converted when a
  -- foreign key tied it to a reference table)
  AND NOT EXISTS (SELECT 1 FROM pg_dist_partition d WHERE d.logicalrelid = c.oid
                  AND NOT (d.partmethod = 'n' AND d.repmodel = 's' AND d.colocationid = 0))
  AND c.relname <> ALL(%s)
ORDER BY c.relname
"""

# Constraints of the tables to distribute: (table, name, type, columns, definition,
# referenced table, referenced columns).
_CONSTRAINTS = """
SELECT t.relname, k.conname, k.contype,
       ARRAY(SELECT a.attname FROM unnest(k.conkey) WITH ORDINALITY u(n, i)
             JOIN pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = u.n ORDER BY u.i)::text[],
       pg_get_constraintdef(k.oid), r.relname,
       ARRAY(SELECT a.attname FROM unnest(k.confkey) WITH ORDINALITY u(n, i)
             JOIN pg_attribute a ON a.attrelid = k.confrelid AND a.attnum = u.n ORDER BY u.i)::text[],
       k.confdeltype, k.confupdtype
FROM pg_constraint k JOIN pg_class t ON t.oid = k.conrelid
JOIN pg_namespace n ON n.oid = t.relnamespace
LEFT JOIN pg_class r ON r.oid = k.confrelid
WHERE n.nspname = 'pgbraid' AND t.relname = ANY(%s) AND k.contype IN ('p', 'u', 'f')
"""

# Unique indexes that are no constraint and lack the distribution column.
_UNIQUE_INDEXES = """
SELECT t.relname, i.relname, x.indexprs IS NOT NULL OR x.indpred IS NOT NULL,
       ARRAY(SELECT a.attname FROM unnest(x.indkey) WITH ORDINALITY u(n, j)
             JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = u.n ORDER BY u.j)::text[]
FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid
JOIN pg_namespace n ON n.oid = t.relnamespace
WHERE n.nspname = 'pgbraid' AND t.relname = ANY(%s) AND x.indisunique
  AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = x.indexrelid)
  AND NOT EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = x.indrelid
                  AND a.attnum = ANY(x.indkey) AND a.attname = %s)
"""

_ACTIONS = {"a": "NO ACTION", "r": "RESTRICT", "c": "CASCADE", "n": "SET NULL", "d": "SET DEFAULT"}


def is_coordinator(conn: psycopg.Connection) -> bool:
    return bool(conn.execute(
        "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')").fetchone()[0])


def is_distributed(conn: psycopg.Connection) -> bool:
    """Whether pgbraid's schema is distributed already (a database being migrated from
    scratch is distributed once, after its last migration: tables get pipeline_id along
    the way, as versions did in 030)."""
    return _anchor(conn) is not None


def distribute(conn: psycopg.Connection) -> list[str]:
    """Distribute (or make reference tables of) the pgbraid tables Citus does not know
    yet, inside the caller's transaction; return their names."""
    _app_login(conn)
    tables = conn.execute(_TABLES, (KEY, list(LOCAL_ONLY))).fetchall()
    if not tables:
        return []
    if not conn.execute("SELECT count(*) FROM citus_get_active_worker_nodes()").fetchone()[0]:
        raise BackendUnavailable("the server is a Citus coordinator without active workers: add "
                                 "them (citus_add_node, or pgbraid cluster start --workers 2)")
    conn.execute("SET LOCAL citus.multi_shard_modify_mode = 'sequential'")
    conn.execute("SET LOCAL citus.enable_unsafe_triggers = on")  # see _triggers below
    by_pipeline = [name for name, keyed in tables if keyed]
    # Keys first, and every foreign key dropped until all tables are Citus's: a local
    # table with a foreign key to a reference table would become a Citus local table.
    foreign = _key_constraints(conn, by_pipeline)
    for name in (name for name, keyed in tables if not keyed):
        conn.execute("SELECT create_reference_table(%s)", (f"pgbraid.{name}",))
    anchor = _anchor(conn)
    for name in by_pipeline:
        conn.execute("SELECT create_distributed_table(%s, %s, colocate_with => %s)",
                     (f"pgbraid.{name}", KEY, anchor or "default"))
        anchor = anchor or f"pgbraid.{name}"
    for table, statement in foreign:
        conn.execute(sql.SQL("ALTER TABLE {} ADD {}").format(_table(table), statement))
    return [name for name, _ in tables]


def _app_login(conn: psycopg.Connection) -> None:
    """Citus connects to a worker as the role the statement runs as, so pgbraid_app,
    NOLOGIN on a plain server, must be able to log in (it has no password: a worker
    lets it in only where its pg_hba.conf trusts the coordinator, as the local
    cluster's Unix sockets do, or with credentials in pg_dist_authinfo)."""
    if conn.execute("SELECT NOT rolcanlogin FROM pg_roles WHERE rolname = 'pgbraid_app'"
                    ).fetchone()[0]:
        conn.execute("ALTER ROLE pgbraid_app LOGIN")


def _anchor(conn: psycopg.Connection) -> str | None:
    """A pgbraid table already distributed by pipeline, to co-locate new ones with."""
    row = conn.execute(
        "SELECT logicalrelid::regclass::text FROM pg_dist_partition d"
        " JOIN pg_class c ON c.oid = d.logicalrelid JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = 'pgbraid' AND d.partmethod = 'h' ORDER BY d.logicalrelid LIMIT 1"
    ).fetchone()
    return row[0] if row else None


def _key_constraints(conn: psycopg.Connection, tables: list[str]) -> list[tuple[str, sql.Composable]]:
    """Rewrite the keys of ``tables`` to include ``pipeline_id``; return the foreign keys
    between them, dropped here, to add once every table is distributed."""
    for table, index, special, columns in conn.execute(_UNIQUE_INDEXES, (tables, KEY)).fetchall():
        if special:
            raise BackendUnavailable(
                f"pgbraid.{table}: unique index {index} has no {KEY} and cannot be distributed "
                f"by Citus; give it {KEY} as its first column in the migration")
        conn.execute(sql.SQL("DROP INDEX pgbraid.{}").format(sql.Identifier(index)))
        conn.execute(sql.SQL("CREATE UNIQUE INDEX {} ON {} ({})").format(
            sql.Identifier(index), _table(table), _columns([KEY, *columns])))
    rows = conn.execute(_CONSTRAINTS, (tables,)).fetchall()
    later = []
    for table, name, kind, columns, definition, target, targets, on_delete, on_update in (
            r for r in rows if r[2] == "f"):
        conn.execute(sql.SQL("ALTER TABLE {} DROP CONSTRAINT {}").format(
            _table(table), sql.Identifier(name)))
        if target not in tables:  # to a reference table: added back as it was
            later.append((table, sql.SQL("CONSTRAINT {} {}").format(
                sql.Identifier(name), sql.SQL(definition))))
            continue
        if KEY not in columns:
            columns, targets = [KEY, *columns], [KEY, *targets]
        later.append((table, sql.SQL(
            "CONSTRAINT {} FOREIGN KEY ({}) REFERENCES {} ({}) ON DELETE {} ON UPDATE {}").format(
                sql.Identifier(name), _columns(columns), _table(target), _columns(targets),
                sql.SQL(_ACTIONS[on_delete]), sql.SQL(_ACTIONS[on_update]))))
    for table, name, kind, columns, *_ in (r for r in rows if r[2] in "pu" and KEY not in r[3]):
        conn.execute(sql.SQL("ALTER TABLE {} DROP CONSTRAINT {}").format(
            _table(table), sql.Identifier(name)))
        conn.execute(sql.SQL("ALTER TABLE {} ADD CONSTRAINT {} {} ({})").format(
            _table(table), sql.Identifier(name),
            sql.SQL("PRIMARY KEY" if kind == "p" else "UNIQUE"), _columns([KEY, *columns])))
    return later


def _table(name: str) -> sql.Composable:
    return sql.Identifier("pgbraid", name)


def _columns(names: list[str]) -> sql.Composable:
    return sql.SQL(", ").join(map(sql.Identifier, names))
