"""Versioned .sql migrations, applied on connect in one transaction each, recorded in a table."""

from __future__ import annotations

import logging
import re
from importlib import resources

import psycopg
from psycopg import sql

from ..errors import BackendUnavailable
from .distribute import distribute, is_coordinator, is_distributed

MIGRATION_LOCK = 0x70676272  # 'pgbr': serialises concurrent connects
OPTIONAL_EXTENSIONS = ("vector", "pg_trgm", "btree_gin", "unaccent", "fuzzystrmatch")
_NAME = re.compile(r"^(\d{3})_[a-z0-9_]+\.sql$")
APP_ROLE_DDL = "CREATE ROLE pgbraid_app NOLOGIN NOSUPERUSER NOBYPASSRLS"
logger = logging.getLogger("pgbraid.db")

# Row-level security evaluates a policy before any non-LEAKPROOF user condition,
# so `tsv @@ query` could not use its GIN index under FORCE RLS: measured on the
# Godot corpus, a bitmap scan of the whole pipeline (13.8 ms) instead of the GIN
# index (2.3 ms), and worse as pipelines grow. These operator functions raise no
# data-dependent errors, so when we are superuser (the embedded server) we
# declare them LEAKPROOF. On an external server without superuser the plans
# stay correct, only slower; `pgbraid migrate` prints the statements a superuser can run.
LEAKPROOF_FUNCTIONS = (
    "pg_catalog.ts_match_vq(tsvector, tsquery)",
    "pg_catalog.arrayoverlap(anyarray, anyarray)",
    "pg_catalog.jsonb_path_exists_opr(jsonb, jsonpath)",
    "similarity_op(text, text)",                    # pg_trgm %
    "word_similarity_commutator_op(text, text)",    # pg_trgm %>
    "pg_catalog.cardinality(anyarray)",             # fragments_word_count (migration 052)
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
            _apply(conn, name, text)
            conn.execute(
                "INSERT INTO pgbraid.schema_migrations (version, name) VALUES (%s, %s)",
                (version, name),
            )
            applied.append(name)
            if distributed:  # its new tables, before the next migration refers to them
                distribute(conn)
        if _is_superuser(conn):  # the embedded server: tune what only it may
            for statement in needs_superuser(conn):
                conn.execute(statement)
        if coordinator:
            distribute(conn)
    return applied


def _apply(conn: psycopg.Connection, name: str, text: str) -> None:
    """One migration; one that needs a privilege the login lacks is BackendUnavailable,
    saying what a DBA must do (PostgreSQL's own message goes to the log only)."""
    if name.startswith("001_") and not _can_create_app_role(conn):
        raise BackendUnavailable(
            f"the login {conn.info.user!r} may not create the role pgbraid_app (it is no "
            f"superuser and lacks CREATEROLE): have a superuser run `{APP_ROLE_DDL};` once "
            "on this server, then connect again", needs_superuser=[APP_ROLE_DDL + ";"])
    try:
        conn.execute(text.encode())
    except psycopg.errors.InsufficientPrivilege as exc:
        logger.error("migration %s as %s: %s", name, conn.info.user, exc.diag.message_primary)
        raise BackendUnavailable(
            f"migration {name} needs a privilege the login {conn.info.user!r} lacks "
            f"(SQLSTATE {exc.sqlstate}; PostgreSQL's message is logged): migrate once as the "
            "database's owner or a superuser", migration=name) from None


def _can_create_app_role(conn: psycopg.Connection) -> bool:
    return bool(conn.execute(
        "SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'pgbraid_app')"
        " OR (SELECT rolsuper OR rolcreaterole FROM pg_roles WHERE rolname = current_user)"
    ).fetchone()[0])


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


def needs_superuser(conn: psycopg.Connection) -> list[sql.Composed]:
    """What only a superuser can still do here: the extensions available but not
    created, and the planner costs and LEAKPROOF declarations above not in place
    (an external server whose owner is no superuser). Each is a statement for a DBA."""
    installed = {row[0] for row in conn.execute("SELECT extname FROM pg_extension")}
    available = {row[0] for row in conn.execute(
        "SELECT name FROM pg_available_extensions WHERE name = ANY(%s)",
        (list(OPTIONAL_EXTENSIONS),))}
    statements = [sql.SQL("CREATE EXTENSION IF NOT EXISTS {}").format(sql.Identifier(name))
                  for name in OPTIONAL_EXTENSIONS if name in available - installed]
    costs = dict(PLANNER_COSTS)
    for signature in dict.fromkeys([*costs, *LEAKPROOF_FUNCTIONS]):
        found = conn.execute(
            "SELECT n.nspname, p.proname, pg_get_function_identity_arguments(p.oid),"
            " p.procost, p.proleakproof FROM pg_proc p"
            " JOIN pg_namespace n ON n.oid = p.pronamespace"
            " WHERE p.oid = to_regprocedure(%s)", (signature,)).fetchone()
        if found is None:
            continue  # its extension is not there: nothing to tune
        schema, name, arguments, cost, leakproof = found
        target = sql.SQL("ALTER FUNCTION {}.{}({})").format(
            sql.Identifier(schema), sql.Identifier(name), sql.SQL(arguments))  # from the catalog
        if signature in costs and cost < costs[signature]:
            statements.append(sql.SQL("{} COST {}").format(target, sql.Literal(costs[signature])))
        if signature in LEAKPROOF_FUNCTIONS and not leakproof:
            statements.append(sql.SQL("{} LEAKPROOF").format(target))
    return statements


def _is_superuser(conn: psycopg.Connection) -> bool:
    row = conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()
    return bool(row and row[0])


def superuser_steps(conn: psycopg.Connection) -> list[str]:
    """``needs_superuser`` as text for a DBA (``pgbraid migrate`` prints it), logged as a
    warning on the ``pgbraid.db`` logger when there is any."""
    if _is_superuser(conn):
        return []  # migrate has just run them
    shown = [statement.as_string(conn) + ";" for statement in needs_superuser(conn)]
    if shown:
        logger.warning("the login that migrated (%s) is no superuser: search is correct but "
                       "slower, and vector strategies are off without pgvector, until a "
                       "superuser runs in this database: %s",
                       conn.info.user, " ".join(shown))
    return shown


def pending(conn: psycopg.Connection) -> list[str]:
    """The migrations not applied yet to the database behind ``conn``."""
    applied = {row[0] for row in conn.execute("SELECT version FROM pgbraid.schema_migrations")}
    return [name for version, name, _ in migration_files() if version not in applied]
