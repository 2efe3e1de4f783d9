"""An external server's setting on the embedded one: a database of its own, owned and
migrated by a login that is no superuser (no CREATEROLE, no BYPASSRLS)."""

from __future__ import annotations

import uuid
from contextlib import contextmanager
from typing import Iterator

import psycopg
from psycopg import sql


@contextmanager
def owned_database(server, superuser, *, app_role: bool = True) -> Iterator[str]:
    """The owner's DSN. ``app_role``: pgbraid_app exists (a DBA made it once per server,
    or another database's migration did), as the owner cannot create it."""
    login, database = f"owner_{uuid.uuid4().hex[:8]}", f"owned_{uuid.uuid4().hex[:8]}"
    superuser.execute(sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER NOBYPASSRLS NOCREATEROLE").format(
        sql.Identifier(login)))
    if app_role and superuser.execute(
            "SELECT 1 FROM pg_roles WHERE rolname = 'pgbraid_app'").fetchone() is None:
        superuser.execute("CREATE ROLE pgbraid_app NOLOGIN NOSUPERUSER NOBYPASSRLS")
    superuser.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(
        sql.Identifier(database), sql.Identifier(login)))
    info = psycopg.conninfo.conninfo_to_dict(server.status().dsn)
    dsn = psycopg.conninfo.make_conninfo(**{**info, "user": login, "dbname": database})
    try:
        yield dsn
    finally:
        superuser.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(database)))
        superuser.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(login)))


def as_superuser_in(server, dsn: str) -> psycopg.Connection:
    """A superuser connection to the database ``dsn`` names (a DBA running what pgbraid printed)."""
    info = psycopg.conninfo.conninfo_to_dict(server.status().dsn)
    database = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
    return psycopg.connect(psycopg.conninfo.make_conninfo(**{**info, "dbname": database}),
                           autocommit=True)
