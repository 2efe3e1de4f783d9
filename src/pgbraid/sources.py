"""Entity sources: the user's own tables, registered so strategies can search them.

A source names a table, its key column, its text column(s) and the columns a
search may be scoped by (``state = 'TX'``). Every name is checked against the
catalog before it is stored, and SQL over the table is composed only from
those checked names (``sql.Identifier``) and parameters, so a column name that
is an injection attempt is simply "no such column".

What may be registered: an ordinary or partitioned table (and every child or
partition under it) outside pgbraid's schema, ``information_schema`` and every
``pg_*`` schema (catalog, TOAST, temp), inside the schemas the operator opened to the tenant
(``PGBRAID_SOURCE_SCHEMAS``, source_schemas.py: deny by default), and not already
claimed by another tenant. Views, materialized
views and foreign tables are refused: they read with their owner's rights (a
superuser's view over ``pgbraid.versions`` would show every tenant's rows), and
a check of what they depend on would have to follow functions too.

Who reads: the tenant's source role (``role_name``), NOLOGIN, not superuser,
no BYPASSRLS, member of nothing, granted USAGE on the table's schema and SELECT
on exactly the registered tables. Reads (``reading``) take that role in every
case, so a missing grant is Forbidden, never a read as the login role.

Privileged steps (create the role, grant, create or drop indexes) are the only
two functions taking the login role's connection: ``provision`` and ``retire``.
"""

from __future__ import annotations

import hashlib
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator

import psycopg
from psycopg import sql
from psycopg.errors import InsufficientPrivilege
from psycopg.rows import class_row

from .errors import Conflict, Forbidden, InvalidRequest, NotEnabled, NotFound
from .ingest.language import CONFIG_NAMES, config_for
from .models import validate_name

if TYPE_CHECKING:
    from .db.database import Database

RESERVED_SCHEMAS = ("pgbraid", "information_schema")  # and every pg_* schema
TABLE_KINDS = ("r", "p")
KIND_NAMES = {"v": "a view", "m": "a materialized view", "f": "a foreign table",
              "S": "a sequence", "i": "an index", "I": "an index", "c": "a composite type",
              "t": "a TOAST table"}


def role_name(tenant: str) -> str:
    """The tenant's source reader, one per tenant, named from a hash (roles are cluster-wide)."""
    return "pgbraid_src_" + hashlib.sha256(tenant.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Source:
    tenant: str
    name: str
    table_schema: str
    table_name: str
    key_column: str
    text_columns: list[str]
    scope_columns: list[str]
    language: str

    @property
    def table(self) -> sql.Composable:
        return sql.Identifier(self.table_schema, self.table_name)

    @property
    def text(self) -> sql.Composable:
        """The searchable text: one column, or the columns joined by spaces."""
        columns = [sql.SQL("coalesce({}::text, '')").format(sql.Identifier(c)) for c in self.text_columns]
        if len(columns) == 1:
            return sql.SQL("{}::text").format(sql.Identifier(self.text_columns[0]))
        return sql.SQL("({})").format(sql.SQL(" || ' ' || ").join(columns))

    def index_names(self) -> dict[str, str]:
        """Per tenant and source (two tenants' sources of one name never share an index)."""
        digest = hashlib.sha256(f"{self.tenant}/{self.name}".encode()).hexdigest()[:12]
        stem = f"pgbraid_{self.name[:20]}_{digest}"  # at most 41 characters, 46 with the suffix
        return {"trigram": f"{stem}_trgm", "fulltext": f"{stem}_tsv"}

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "table": f"{self.table_schema}.{self.table_name}",
                "key": self.key_column, "text": self.text_columns, "scope": self.scope_columns,
                "language": self.language}


@dataclass(frozen=True)
class Retired:
    """A removed source, and which of its grants no other source of the tenant still needs."""
    source: Source
    table_unused: bool
    schema_unused: bool


_SELECT = ("SELECT tenant_id AS tenant, name, table_schema, table_name, key_column, text_columns,"
           " scope_columns, language::text AS language FROM pgbraid.entity_sources")

# The relation and everything that reads through it (inheritance children, partitions).
_TREE = """
WITH RECURSIVE tree(oid, depth) AS (
    SELECT c.oid, 0 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = %(schema)s AND c.relname = %(table)s
    UNION
    SELECT i.inhrelid, t.depth + 1 FROM pg_inherits i JOIN tree t ON i.inhparent = t.oid)
SELECT t.depth, n.nspname, c.relname, c.relkind::text
FROM tree t JOIN pg_class c ON c.oid = t.oid JOIN pg_namespace n ON n.oid = c.relnamespace
ORDER BY t.depth, n.nspname, c.relname
"""


def _refuse_schema(schema: str, allowed: frozenset[str], what: str) -> None:
    if schema in RESERVED_SCHEMAS or schema.startswith("pg_"):
        raise InvalidRequest(f"{what} is in {schema}, pgbraid's or PostgreSQL's own schema: "
                             "entity sources are tables of your own", field="table")
    if allowed and schema not in allowed:
        raise InvalidRequest(f"{what} is not in a schema PGBRAID_SOURCE_SCHEMAS allows "
                             f"({', '.join(sorted(allowed))})", field="table")


def check_table(conn: psycopg.Connection, schema: str, table: str,
                allowed: frozenset[str] = frozenset()) -> None:
    """Refuse anything but an ordinary or partitioned table of the user's own, children included."""
    _refuse_schema(schema, allowed, f"{schema}.{table}")
    rows = conn.execute(_TREE, {"schema": schema, "table": table}).fetchall()
    if not rows:
        raise InvalidRequest(f"table {schema}.{table} does not exist", field="table")
    for depth, nspname, relname, relkind in rows:
        what = (f"{schema}.{table}" if depth == 0
                else f"{nspname}.{relname}, under {schema}.{table},")
        if relkind not in TABLE_KINDS:
            raise InvalidRequest(f"{what} is {KIND_NAMES.get(relkind, 'not a table')}: only"
                                 " ordinary and partitioned tables can be entity sources (views,"
                                 " materialized views and foreign tables read with their"
                                 " owner's rights)", field="table")
        _refuse_schema(nspname, allowed, what)


def _columns(conn: psycopg.Connection, schema: str, table: str) -> dict[str, str]:
    rows = conn.execute(
        "SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a"
        " JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = %s AND c.relname = %s AND c.relkind IN ('r', 'p')"
        " AND a.attnum > 0 AND NOT a.attisdropped", (schema, table)).fetchall()
    if not rows:
        raise InvalidRequest(f"table {schema}.{table} has no columns", field="table")
    return dict(rows)


def check(conn: psycopg.Connection, tenant: str, name: str, *, table: str, key: str,
          text: list[str], scope: list[str], schema: str = "public", language: str = "english",
          allowed: frozenset[str] = frozenset()) -> Source:
    """Validate a source against the catalog (any role may read it); nothing is written."""
    validate_name("entity source", name)
    if "." in table and schema == "public":
        schema, table = table.split(".", 1)
    config = config_for(language)
    if config is None:
        raise InvalidRequest(f"unknown language {language!r}; use one of "
                             f"{', '.join(sorted(CONFIG_NAMES))}", field="language")
    if not text:
        raise InvalidRequest("give at least one text column", field="text")
    check_table(conn, schema, table, allowed)
    columns = _columns(conn, schema, table)
    for kind, wanted in (("key", [key]), ("text", text), ("scope", scope)):
        missing = [c for c in wanted if c not in columns]
        if missing:
            raise InvalidRequest(f"{schema}.{table} has no {kind} column(s) {missing}", field=kind)
    return Source(tenant, name, schema, table, key, list(text), list(scope), config)


def add(conn: psycopg.Connection, source: Source) -> None:
    """Claim the table for the session's tenant and store the source (one transaction)."""
    where = (source.table_schema, source.table_name)
    conn.execute("INSERT INTO pgbraid.entity_source_tables (table_schema, table_name)"
                 " VALUES (%s, %s) ON CONFLICT DO NOTHING", where)
    # The insert did nothing if anyone holds the claim; RLS shows it only if it is ours.
    if conn.execute("SELECT 1 FROM pgbraid.entity_source_tables"
                    " WHERE table_schema = %s AND table_name = %s", where).fetchone() is None:
        raise Conflict(f"{source.table_schema}.{source.table_name} is registered as an entity "
                       "source by another tenant", field="table")
    row = conn.execute(
        "INSERT INTO pgbraid.entity_sources (name, table_schema, table_name, key_column,"
        " text_columns, scope_columns, language) VALUES (%s, %s, %s, %s, %s, %s, %s::regconfig)"
        " ON CONFLICT (tenant_id, name) DO NOTHING RETURNING name",
        (source.name, source.table_schema, source.table_name, source.key_column,
         source.text_columns, source.scope_columns, source.language)).fetchone()
    if row is None:
        raise Conflict(f"entity source {source.name!r} already exists", field="name")


def remove(conn: psycopg.Connection, name: str) -> Retired:
    """Delete the source (and the tenant's claim on its table when no other source uses it)."""
    source = get(conn, name)
    conn.execute("DELETE FROM pgbraid.entity_sources WHERE name = %s", (name,))
    on_table, in_schema = conn.execute(
        "SELECT count(*) FILTER (WHERE table_name = %s), count(*) FROM pgbraid.entity_sources"
        " WHERE table_schema = %s", (source.table_name, source.table_schema)).fetchone()
    if on_table == 0:
        conn.execute("DELETE FROM pgbraid.entity_source_tables WHERE table_schema = %s"
                     " AND table_name = %s", (source.table_schema, source.table_name))
    return Retired(source, table_unused=on_table == 0, schema_unused=in_schema == 0)


def get(conn: psycopg.Connection, name: str) -> Source:
    with conn.cursor(row_factory=class_row(Source)) as cur:
        source = cur.execute(_SELECT + " WHERE name = %s", (name,)).fetchone()
    if source is None:
        raise NotFound(f"entity source {name!r} does not exist", entity=name)
    return source


def list_all(conn: psycopg.Connection) -> list[Source]:
    with conn.cursor(row_factory=class_row(Source)) as cur:
        return cur.execute(_SELECT + " ORDER BY name").fetchall()


# -- privileged steps: the login role's connection ----------------------------------

def provision(admin: psycopg.Connection, source: Source, *, indexes: bool = False,
              allowed: frozenset[str] = frozenset()) -> None:
    """Check the table again, give the tenant's source role SELECT on it, and (with consent)
    create its indexes: all or nothing. The only DDL pgbraid runs on a user's table."""
    with admin.transaction():
        check_table(admin, source.table_schema, source.table_name, allowed)
        role = _source_role(admin, source.tenant)
        _grant(admin, role, source)
        if indexes:
            _create_indexes(admin, source)


def retire(admin: psycopg.Connection, retired: Retired) -> None:
    """Drop a removed source's indexes and revoke the grants no other source of its tenant needs."""
    source = retired.source
    try:
        with admin.transaction():
            _drop_indexes(admin, source)
            _revoke(admin, role_name(source.tenant), retired)
    except InsufficientPrivilege as exc:
        raise NotEnabled(f"the login role cannot drop the indexes of entity source {source.name!r}"
                         f" on {source.table_schema}.{source.table_name} (only its owner can); "
                         "nothing was removed", capability="entity_sources") from exc


def _revoke(admin: psycopg.Connection, role: str, retired: Retired) -> None:
    source = retired.source
    if admin.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone() is None:
        return
    if retired.table_unused and _table_exists(admin, source):
        admin.execute(sql.SQL("REVOKE ALL ON TABLE {} FROM {}").format(
            source.table, sql.Identifier(role)))
        if admin.execute(_HOLDS, (source.table_schema, source.table_name, role)).fetchone()[0]:
            # REVOKE by a role that is not the grantor only warns
            raise NotEnabled(f"the login role cannot revoke {role}'s grant on "
                             f"{source.table_schema}.{source.table_name}; nothing was removed",
                             capability="entity_sources")
    if retired.schema_unused and admin.execute(
            "SELECT 1 FROM pg_namespace WHERE nspname = %s", (source.table_schema,)).fetchone():
        admin.execute(sql.SQL("REVOKE ALL ON SCHEMA {} FROM {}").format(
            sql.Identifier(source.table_schema), sql.Identifier(role)))


# Does the role still hold any privilege of its own on the table?
_HOLDS = """
SELECT EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace,
                      aclexplode(c.relacl) a
               WHERE n.nspname = %s AND c.relname = %s AND a.grantee = to_regrole(%s))
"""


_ROLE_EXTRAS = """
SELECT r.rolsuper OR r.rolbypassrls OR r.rolcanlogin OR r.rolcreaterole OR r.rolcreatedb
       OR EXISTS (SELECT 1 FROM pg_auth_members m WHERE m.member = r.oid)
       OR has_schema_privilege(r.oid, 'pgbraid', 'USAGE')
FROM pg_roles r WHERE r.rolname = %s
"""


def _source_role(admin: psycopg.Connection, tenant: str) -> str:
    """The tenant's source role, created if missing; refused if it holds more than it should."""
    superuser, createrole, login = admin.execute(
        "SELECT rolsuper, rolcreaterole, rolname FROM pg_roles WHERE rolname = current_user"
    ).fetchone()
    if not (superuser or createrole):
        raise NotEnabled(f"entity sources are read as a role per tenant, and the login role "
                         f"{login} can neither create roles (CREATEROLE) nor is superuser",
                         capability="entity_sources")
    role = role_name(tenant)
    admin.execute("SELECT pg_advisory_xact_lock(hashtext('pgbraid.source_role'), hashtext(%s))",
                  (role,))
    extras = admin.execute(_ROLE_EXTRAS, (role,)).fetchone()
    if extras is None:
        admin.execute(sql.SQL("CREATE ROLE {} NOLOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB"
                              " NOCREATEROLE NOINHERIT").format(sql.Identifier(role)))
    elif extras[0]:
        raise NotEnabled(f"role {role} exists with more rights than a source reader may hold "
                         "(login, superuser, BYPASSRLS, memberships or pgbraid's schema): "
                         "a DBA must drop it", role=role)
    if not superuser:  # SET ROLE needs membership; PostgreSQL 16+ gives the creator none
        admin.execute(sql.SQL("GRANT {} TO CURRENT_USER").format(sql.Identifier(role)))
    return role


def _grant(admin: psycopg.Connection, role: str, source: Source) -> None:
    # GRANT without the grant option only warns; the check afterwards is what counts.
    admin.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(
        sql.Identifier(source.table_schema), sql.Identifier(role)))
    admin.execute(sql.SQL("GRANT SELECT ON TABLE {} TO {}").format(
        source.table, sql.Identifier(role)))
    granted = admin.execute(
        "SELECT has_schema_privilege(%(role)s, %(schema)s, 'USAGE'),"
        " has_table_privilege(%(role)s, format('%%I.%%I', %(schema)s::text, %(table)s::text),"
        " 'SELECT')",
        {"role": role, "schema": source.table_schema, "table": source.table_name}).fetchone()
    if not all(granted):
        raise NotEnabled(f"the login role cannot grant SELECT on {source.table_schema}."
                         f"{source.table_name} to {role}: it must own the table or hold SELECT on "
                         "it WITH GRANT OPTION (and USAGE on its schema)",
                         capability="entity_sources")


def _create_indexes(admin: psycopg.Connection, source: Source) -> None:
    """The trigram and tsvector expression indexes the strategies need (with consent)."""
    names = source.index_names()
    try:
        admin.execute(sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} USING gin (({}) gin_trgm_ops)").format(
            sql.Identifier(names["trigram"]), source.table, source.text))
        admin.execute(sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} USING gin (to_tsvector({}::regconfig, {}))").format(
            sql.Identifier(names["fulltext"]), source.table, sql.Literal(source.language), source.text))
    except InsufficientPrivilege as exc:
        raise NotEnabled(f"only the owner of {source.table_schema}.{source.table_name}, with CREATE"
                         " on its schema, can create its indexes: register it without "
                         "--create-indexes, or as its owner",
                         capability="entity_sources") from exc


def _drop_indexes(admin: psycopg.Connection, source: Source) -> None:
    """Only pgbraid's own indexes of this source, and only on its table."""
    ours = list(source.index_names().values())
    for (index,) in admin.execute(
            "SELECT indexname FROM pg_indexes WHERE schemaname = %s AND tablename = %s"
            " AND indexname = ANY(%s)", (source.table_schema, source.table_name, ours)).fetchall():
        admin.execute(sql.SQL("DROP INDEX IF EXISTS {}").format(
            sql.Identifier(source.table_schema, index)))


def _table_exists(conn: psycopg.Connection, source: Source) -> bool:
    return conn.execute(
        "SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = %s AND c.relname = %s",
        (source.table_schema, source.table_name)).fetchone() is not None


# -- reads: the tenant's source role ---------------------------------------------------

@contextmanager
def reading(db: "Database", source: Source) -> Iterator[psycopg.Connection]:
    """A session as the tenant's source role: it can read the registered tables and nothing
    of pgbraid's. A missing role or grant is Forbidden, never a read as the login role."""
    role = role_name(source.tenant)
    try:
        with db.session(source.tenant, role=role) as conn:
            yield conn
    except InsufficientPrivilege as exc:  # no grant, or the login role may not take the role
        raise _unreadable(source, role) from exc
    except InvalidRequest as exc:  # the session translates class 22: no such role (22023)
        if isinstance(exc.__cause__, psycopg.errors.InvalidParameterValue):
            raise _unreadable(source, role) from exc
        raise


def _unreadable(source: Source, role: str) -> Forbidden:
    return Forbidden(f"entity source {source.name!r} cannot be read: the tenant's source role "
                     f"{role} is missing, lacks SELECT on {source.table_schema}."
                     f"{source.table_name}, or the login role may not take it; an admin "
                     "registering the source again (source delete, source add) grants it",
                     entity=source.name)


def missing_indexes(conn: psycopg.Connection, source: Source) -> list[str]:
    present = {r[0] for r in conn.execute(
        "SELECT indexname FROM pg_indexes WHERE schemaname = %s AND tablename = %s",
        (source.table_schema, source.table_name))}
    return [kind for kind, index in source.index_names().items() if index not in present]


def scope_condition(source: Source, scope: dict[str, Any]) -> tuple[sql.Composable, dict[str, str]]:
    """``col = value AND ...`` over the source's declared scope columns only."""
    unknown = [c for c in scope if c not in source.scope_columns]
    if unknown:
        raise InvalidRequest(f"entity {source.name!r} cannot be scoped by {unknown}; scope "
                             f"columns are {source.scope_columns}", field="scope")
    params: dict[str, str] = {}
    parts = []
    for i, (column, value) in enumerate(scope.items()):
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise InvalidRequest("scope values must be strings or numbers", field="scope")
        params[f"scope_{i}"] = str(value)
        parts.append(sql.SQL("{}::text = {}").format(sql.Identifier(column),
                                                     sql.Placeholder(f"scope_{i}")))
    return (sql.SQL(" AND ").join(parts) if parts else sql.SQL("true")), params
