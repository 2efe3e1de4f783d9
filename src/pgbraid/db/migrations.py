"""Versioned .sql migrations, applied on connect in one transaction each, recorded in a table."""

from __future__ import annotations

import re
from importlib import resources

import psycopg
from psycopg import sql

from ..errors import BackendUnavailable
from .distribute import distribute, is_coordinator, is_distributed

MIGRATION_LOCK = 0x70676272  # 'pgbr': serialises concurrent connects
OPTIONAL_EXTENSIONS = ("vector", "pg_trgm", "btree_gin", "unaccent", "fuzzystrmatch")
_NAME = re.compile(r"^(\d{3})_[a-z0-9_]+\.sql$")

# Row-level security evaluates a policy before any non-LEAKPROOF user condition,
# so `tsv @@ query` could not use its GIN index under FORCE RLS: measured on the
# Godot corpus, a bitmap scan of the whole pipeline (13.8 ms) instead of the GIN
# index (2.3 ms), and worse as pipelines grow. These operator functions raise no
# data-dependent errors, so when we are superuser (the embedded server) we
# declare them LEAKPROOF. On an external server without superuser the plans
# stay correct, only slower; `pgbraid server status` reports it.
LEAKPROOF_FUNCTIONS = (
    "pg_catalog.ts_match_vq(tsvector, tsquery)",
    "pg_catalog.arrayoverlap(anyarray, anyarray)",
    "pg_catalog.jsonb_path_exists_opr(jsonb, jsonpath)",
    "similarity_op(text, text)",                    # pg_trgm %
    "word_similarity_commutator_op(text, text)",    # pg_trgm %>
)


def migration_files() -> list[tuple[int, str, str]]:
    folder = resources.files("pgbraid.db") / "migrations"
    found = []
    for entry in folder.iterdir():
        match = _NAME.match(entry.name)
        if match:
            found.append((int(match.group(1)), entry.name, entry.read_text(encoding="utf-8")))
    return sorted(found)


def migrate(conn: psycopg.Connection, *, until: int | None = None) -> list[str]:
    """Create available extensions and apply pending migrations (up to version ``until``,
    for tests of an older schema); return the names applied."""
    applied: list[str] = []
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        _create_extensions(conn)
        conn.execute("CREATE SCHEMA IF NOT EXISTS pgbraid")
        conn.execute(
            "CREATE TABLE IF NOT EXISTS pgbraid.schema_migrations ("
            " version integer PRIMARY KEY, name text NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        done = dict(conn.execute("SELECT version, name FROM pgbraid.schema_migrations").fetchall())
        coordinator = is_coordinator(conn)
        distributed = coordinator and is_distributed(conn)
        for version, name, text in migration_files():
            if version in done and done[version] != name:
                raise BackendUnavailable(
                    f"the database records migration {version} as {done[version]}, but this "
                    f"pgbraid's migration {version} is {name}: it was migrated by another build; "
                    "use a database made by this build")
            if version in done or (until is not None and version > until):
                continue
            conn.execute(text.encode())
            conn.execute(
                "INSERT INTO pgbraid.schema_migrations (version, name) VALUES (%s, %s)",
                (version, name),
            )
            applied.append(name)
            if distributed:  # its new tables, before the next migration refers to them
                distribute(conn)
        _declare_leakproof(conn)
        if coordinator:
            distribute(conn)
    return applied


def _create_extensions(conn: psycopg.Connection) -> None:
    available = {
        row[0]
        for row in conn.execute(
            "SELECT name FROM pg_available_extensions WHERE name = ANY(%s)",
            (list(OPTIONAL_EXTENSIONS),),
        )
    }
    for name in OPTIONAL_EXTENSIONS:
        if name not in available:
            continue
        try:
            with conn.transaction():
                conn.execute(
                    sql.SQL("CREATE EXTENSION IF NOT EXISTS {}").format(sql.Identifier(name))
                )
        except psycopg.errors.InsufficientPrivilege:
            pass  # an external server whose owner did not install it: strategies say so

# pg_trgm declares its similarity functions with COST 1, so the planner prefers
# to compute word_similarity over every row of a pipeline (measured: 1 s seq scan
# over the Godot and company-name pipelines) to the GIN index (5 ms). Their real
# cost is that of comparing trigram sets.
PLANNER_COSTS = (
    ("similarity(text, text)", 200),
    ("word_similarity(text, text)", 200),
    ("similarity_op(text, text)", 200),
    ("word_similarity_commutator_op(text, text)", 200),
)


def _declare_leakproof(conn: psycopg.Connection) -> None:
    superuser = conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()
    if not (superuser and superuser[0]):
        return
    for signature, cost in PLANNER_COSTS:
        found = conn.execute("SELECT procost FROM pg_proc WHERE oid = to_regprocedure(%s)",
                             (signature,)).fetchone()
        if found and found[0] < cost:
            conn.execute(sql.SQL("ALTER FUNCTION {} COST {}").format(sql.SQL(signature),
                                                                   sql.Literal(cost)))
    for signature in LEAKPROOF_FUNCTIONS:
        found = conn.execute("SELECT proleakproof FROM pg_proc WHERE oid = to_regprocedure(%s)",
                             (signature,)).fetchone()
        if found and not found[0]:
            # signature comes from the constant above, never from input
            conn.execute(sql.SQL("ALTER FUNCTION {} LEAKPROOF").format(sql.SQL(signature)))


def leakproof_missing(conn: psycopg.Connection) -> list[str]:
    """The search operators that row-level security will keep away from their indexes."""
    return [s for s in LEAKPROOF_FUNCTIONS if not conn.execute(
        "SELECT coalesce((SELECT proleakproof FROM pg_proc WHERE oid = to_regprocedure(%s)), true)",
        (s,)).fetchone()[0]]


def pending(conn: psycopg.Connection) -> list[str]:
    """The migrations not applied yet to the database behind ``conn``."""
    applied = {row[0] for row in conn.execute("SELECT version FROM pgbraid.schema_migrations")}
    return [name for version, name, _ in migration_files() if version not in applied]
