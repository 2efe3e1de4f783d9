"""``pgbraid migrate`` on an external server whose owner is no superuser: it migrates
and prints what only a superuser can still do, or fails naming what is missing; and
every SECURITY DEFINER function of pgbraid's has its search_path pinned."""

from __future__ import annotations

import json

import psycopg
from typer.testing import CliRunner

from pgbraid.cli import app
from pgbraid.db.migrations import LEAKPROOF_FUNCTIONS, migration_files

from .external import as_superuser_in, owned_database


def _migrate(dsn: str, *args: str):
    return CliRunner().invoke(app, ["migrate", *args], env={"PGBRAID_DSN": dsn})


def test_migrating_as_an_owner_that_is_no_superuser_prints_what_a_dba_must_run(server, superuser):
    with owned_database(server, superuser) as dsn:  # and no GRANT SET ON PARAMETER
        result = _migrate(dsn, "--json")
        assert result.exit_code == 0, result.output
        body = json.loads(result.output)
        assert body["applied"] == [name for _, name, _ in migration_files()]
        steps = body["needs_superuser"]
        assert "CREATE EXTENSION IF NOT EXISTS \"vector\";" in steps
        assert 'ALTER FUNCTION "pg_catalog"."ts_match_vq"(tsvector, tsquery) LEAKPROOF;' in steps
        assert sum("LEAKPROOF" in s for s in steps) == len(LEAKPROOF_FUNCTIONS)
        assert sum(" COST " in s for s in steps) == 4
        with as_superuser_in(server, dsn) as dba:  # what a DBA does with them
            for statement in steps:
                if statement.startswith("ALTER FUNCTION"):
                    dba.execute(statement)
        again = _migrate(dsn)
        assert again.exit_code == 0, again.output
        assert "none pending" in again.output and "LEAKPROOF" not in again.output
        assert "CREATE EXTENSION" in again.output  # the one step it still lacks


def test_an_owner_that_cannot_create_the_app_role_is_told_the_statement(server, superuser):
    away = "pgbraid_app_away"
    with owned_database(server, superuser, app_role=False) as dsn:
        superuser.execute(f"ALTER ROLE pgbraid_app RENAME TO {away}")
        try:
            result = _migrate(dsn, "--json")
        finally:
            superuser.execute(f"ALTER ROLE {away} RENAME TO pgbraid_app")
        assert result.exit_code == 3, result.output
        error = json.loads(result.output)["error"]
        assert error["code"] == "backend_unavailable"
        assert "CREATE ROLE pgbraid_app NOLOGIN NOSUPERUSER NOBYPASSRLS;" in error["message"]
        with psycopg.connect(dsn) as owner:  # nothing was written
            assert owner.execute("SELECT to_regclass('pgbraid.schema_migrations')"
                                 ).fetchone()[0] is None


UNPINNED = """
SELECT p.oid::regprocedure::text FROM pg_proc p
JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE n.nspname = 'pgbraid' AND p.prosecdef
  AND NOT EXISTS (SELECT 1 FROM unnest(p.proconfig) c
                  WHERE c ~ '^search_path=pg_catalog(, *[a-z_]+)*, *pg_temp$')
ORDER BY 1"""


def test_every_security_definer_function_pins_its_search_path(client, superuser):
    """pg_catalog first and pg_temp named last (unnamed, pg_temp is searched first)."""
    client.pipelines()  # migrated
    defined = superuser.execute("SELECT count(*) FROM pg_proc WHERE prosecdef AND"
                                " pronamespace = 'pgbraid'::regnamespace").fetchone()[0]
    assert defined >= 2  # the key lookup and the audit purge
    assert superuser.execute(UNPINNED).fetchall() == []
    with superuser.transaction(force_rollback=True):  # the check sees one that is not
        for config in ("", "SET search_path = pgbraid, pg_catalog",
                       "SET search_path = pg_catalog"):
            superuser.execute("CREATE OR REPLACE FUNCTION pgbraid.probe() RETURNS int"
                              f" LANGUAGE sql SECURITY DEFINER {config} AS 'SELECT 1'")
            assert superuser.execute(UNPINNED).fetchall() == [("pgbraid.probe()",)], config
