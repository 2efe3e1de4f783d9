"""Entity sources: the user's own tables, registered so strategies can search them.

A source names a table, its key column, its text column(s) and the columns a
search may be scoped by (``state = 'TX'``). Every name is checked against the
catalog before it is stored, and SQL over the table is composed only from
those checked names (``sql.Identifier``) and parameters, so a column name that
is an injection attempt is simply "no such column". Queries over user tables
run as the login role (which owns or can read them), not as pgbraid_app.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import class_row

from .errors import Conflict, InvalidRequest, NotFound
from .ingest.language import CONFIG_NAMES, config_for
from .models import validate_name


@dataclass(frozen=True)
class Source:
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
        return {"trigram": f"pgbraid_{self.name}_trgm", "fulltext": f"pgbraid_{self.name}_tsv"}

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "table": f"{self.table_schema}.{self.table_name}",
                "key": self.key_column, "text": self.text_columns, "scope": self.scope_columns,
                "language": self.language}


_SELECT = ("SELECT name, table_schema, table_name, key_column, text_columns, scope_columns,"
           " language::text AS language FROM pgbraid.entity_sources")


def _columns(conn: psycopg.Connection, schema: str, table: str) -> dict[str, str]:
    rows = conn.execute(
        "SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a"
        " JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = %s AND c.relname = %s AND c.relkind IN ('r', 'p', 'v', 'm', 'f')"
        " AND a.attnum > 0 AND NOT a.attisdropped", (schema, table)).fetchall()
    if not rows:
        raise InvalidRequest(f"table {schema}.{table} does not exist (or has no columns)",
                             field="table")
    return dict(rows)


def check(admin: psycopg.Connection, name: str, *, table: str, key: str, text: list[str],
          scope: list[str], schema: str = "public", language: str = "english") -> Source:
    """Validate a source against the catalog; nothing is written."""
    validate_name("entity source", name)
    if "." in table and schema == "public":
        schema, table = table.split(".", 1)
    config = config_for(language)
    if config is None:
        raise InvalidRequest(f"unknown language {language!r}; use one of "
                             f"{', '.join(sorted(CONFIG_NAMES))}", field="language")
    if not text:
        raise InvalidRequest("give at least one text column", field="text")
    columns = _columns(admin, schema, table)
    for kind, wanted in (("key", [key]), ("text", text), ("scope", scope)):
        missing = [c for c in wanted if c not in columns]
        if missing:
            raise InvalidRequest(f"{schema}.{table} has no {kind} column(s) {missing}", field=kind)
    return Source(name, schema, table, key, list(text), list(scope), config)


def add(conn: psycopg.Connection, source: Source) -> None:
    row = conn.execute(
        "INSERT INTO pgbraid.entity_sources (name, table_schema, table_name, key_column,"
        " text_columns, scope_columns, language) VALUES (%s, %s, %s, %s, %s, %s, %s::regconfig)"
        " ON CONFLICT (tenant_id, name) DO NOTHING RETURNING name",
        (source.name, source.table_schema, source.table_name, source.key_column,
         source.text_columns, source.scope_columns, source.language)).fetchone()
    if row is None:
        raise Conflict(f"entity source {source.name!r} already exists", field="name")


def remove(conn: psycopg.Connection, name: str) -> None:
    row = conn.execute("DELETE FROM pgbraid.entity_sources WHERE name = %s RETURNING name",
                       (name,)).fetchone()
    if row is None:
        raise NotFound(f"entity source {name!r} does not exist", entity=name)


def get(conn: psycopg.Connection, name: str) -> Source:
    with conn.cursor(row_factory=class_row(Source)) as cur:
        source = cur.execute(_SELECT + " WHERE name = %s", (name,)).fetchone()
    if source is None:
        raise NotFound(f"entity source {name!r} does not exist", entity=name)
    return source


def list_all(conn: psycopg.Connection) -> list[Source]:
    with conn.cursor(row_factory=class_row(Source)) as cur:
        return cur.execute(_SELECT + " ORDER BY name").fetchall()


def create_indexes(admin: psycopg.Connection, source: Source) -> None:
    """The trigram and tsvector expression indexes the strategies need (with consent)."""
    names = source.index_names()
    admin.execute(sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} USING gin (({}) gin_trgm_ops)").format(
        sql.Identifier(names["trigram"]), source.table, source.text))
    admin.execute(sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} USING gin (to_tsvector({}::regconfig, {}))").format(
        sql.Identifier(names["fulltext"]), source.table, sql.Literal(source.language), source.text))


def missing_indexes(admin: psycopg.Connection, source: Source) -> list[str]:
    present = {r[0] for r in admin.execute(
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
