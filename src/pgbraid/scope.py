"""The one place that decides which fragments a request may see.

Every strategy's SQL takes its scope from ``Scope.where()``: pipeline, current
version (or the version valid at ``as_of``), not quarantined, classifications
(resolved through their hierarchy), and the metadata filter. Tenant isolation
is enforced underneath by row-level security (see db/database.py).

The filter language (JSON)::

    {"year": 2020}                              equality (arrays: contains)
    {"year": {"gte": 2000, "lt": 2010}}         operators, ANDed
    {"tag": {"in": ["a", "b"]}}                 membership
    {"and": [...]}, {"or": [...]}, {"not": {...}}
    {"a.b": 1}                                  nested keys

Limits (``FilterLimits``, from settings): nesting depth, conditions, bytes per
string and for the whole filter. They are checked by one iterative walk before
anything recursive (the compiler, pydantic, json) sees the filter, so a filter
nested 100,000 deep or holding 10 MB is refused in microseconds.

Conditions compile to ``metadata @? jsonpath`` with the value inside the
jsonpath parameter, so the GIN ``jsonb_path_ops`` index serves equality.
A missing key never equals anything, so ``ne`` / ``nin`` / ``not`` keep it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable, Mapping

import psycopg
from psycopg import sql

from .errors import Forbidden, InvalidRequest, PayloadTooLarge
from .models import printable, shown, text_flaw

PERMISSIONS = ("read", "write", "execute", "admin")
ANY_PIPELINE = "*"


@dataclass(frozen=True)
class Principal:
    """Who is asking: a tenant, what it may do per pipeline, what it may hold.

    ``permissions`` maps a pipeline name (or ``"*"``, every pipeline of the
    tenant) to the permissions held there; ``admin`` on a pipeline implies the
    other three. ``tenant_admin`` may manage the tenant itself (pipelines,
    entity sources, classifications, keys). ``classifications`` bounds what a
    request may claim to hold (None: anything, as for the local process);
    ``default_classifications`` is what a request that names none holds.
    """

    tenant: str
    permissions: Mapping[str, frozenset[str]] = field(default_factory=dict)
    classifications: tuple[str, ...] | None = None
    tenant_admin: bool = False
    key_id: str | None = None

    @classmethod
    def local(cls, tenant: str) -> "Principal":
        """The local process: its tenant's admin (the Python client's default)."""
        return cls(tenant, {ANY_PIPELINE: frozenset(PERMISSIONS)}, None, True)

    @property
    def default_classifications(self) -> tuple[str, ...]:
        """What a request naming no classification holds: the principal's, and public."""
        return tuple(dict.fromkeys((*(self.classifications or ()), "public")))

    def allows(self, pipeline: str, permission: str) -> bool:
        held = self.permissions.get(pipeline, frozenset()) | self.permissions.get(
            ANY_PIPELINE, frozenset())
        return permission in held or "admin" in held

    def require(self, pipeline: str, *permissions: str) -> None:
        missing = [p for p in permissions if not self.allows(pipeline, p)]
        if missing:
            raise Forbidden(f"this principal lacks {' and '.join(missing)} permission on "
                            f"pipeline {pipeline!r}", pipeline=pipeline, missing=missing)

    def require_tenant_admin(self, action: str) -> None:
        if not self.tenant_admin:
            raise Forbidden(f"{action} needs the tenant's admin", action=action)

    @property
    def unrestricted(self) -> bool:
        """The tenant's admin with every permission on every pipeline and any classification."""
        return (self.tenant_admin and self.classifications is None
                and "admin" in self.permissions.get(ANY_PIPELINE, frozenset()))

    def require_unrestricted_admin(self, action: str) -> None:
        """For what shows the whole tenant (the audit log names every pipeline and document)."""
        if not self.unrestricted:
            raise Forbidden(f"{action} needs the tenant's unrestricted admin (admin on every "
                            "pipeline '*', no classification bound)", action=action)


MAX_FILTER_DEPTH = 8
MAX_FILTER_CONDITIONS = 64


@dataclass(frozen=True)
class FilterLimits:
    """How large a filter may be (settings ``PGBRAID_FILTER_MAX_*``)."""

    depth: int = MAX_FILTER_DEPTH
    """and / or / not levels."""
    conditions: int = MAX_FILTER_CONDITIONS
    value_bytes: int = 1024
    """UTF-8 bytes of any one string (key or value)."""
    total_bytes: int = 65_536
    """About the filter's size as JSON: strings' bytes + 2, 4 per other scalar, 2 per container."""


# The largest limits settings may choose: Scope.where() compiles under these, since the
# request was checked against the configured ones before (Engine.parse).
CEILING = FilterLimits(depth=32, conditions=1024, value_bytes=1 << 20, total_bytes=16 << 20)


def check_filter_size(node: Any, limits: FilterLimits) -> None:
    """Depth, bytes and text of a filter, walked without recursion."""
    containers = 2 * limits.depth + 3  # and/or: a list and an object per level; leaf: op + list
    total = 0
    stack: list[tuple[Any, int]] = [(node, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > containers:
                raise InvalidRequest(f"filter nests deeper than {limits.depth} levels",
                                     field="filters")
            total += 2
            if isinstance(item, dict):
                for key, value in item.items():
                    if not isinstance(key, str):
                        raise InvalidRequest(f"filter keys must be strings, got {type(key).__name__}",
                                             field="filters")
                    total += _string_size(key, limits)
                    stack.append((value, depth + 1))
            else:
                stack.extend((value, depth + 1) for value in item)
        else:
            total += _string_size(item, limits) if isinstance(item, str) else 4
        if total > limits.total_bytes:
            raise PayloadTooLarge(f"filter is larger than {limits.total_bytes} bytes",
                                  field="filters")


def _string_size(text: str, limits: FilterLimits) -> int:
    # len() first: a 10 MB string is refused without being encoded.
    size = len(text) if len(text) > limits.value_bytes else len(text.encode("utf-8", "surrogatepass"))
    if size > limits.value_bytes:
        raise PayloadTooLarge(f"a filter string is {size} bytes or more; the limit is "
                              f"{limits.value_bytes}", field="filters")
    flaw = text_flaw(text)
    if flaw:
        raise InvalidRequest(f"filter key or value '{printable(text, 40)}' contains {flaw}",
                             field="filters")
    return size + 2


@dataclass(frozen=True)
class Operator:
    key: str
    description: str
    render: Callable[[str, Any], tuple[str, bool]]
    """(jsonpath, negate) for a path and a value."""


def _scalar(value: Any, op: str) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidRequest(f"filter value for {op!r} must be a finite number", field="filters")
    if isinstance(value, int) and not -2**63 <= value < 2**63:
        raise InvalidRequest(f"filter value for {op!r} is beyond a 64-bit integer", field="filters")
    if value is None or isinstance(value, (str, int, float, bool)):
        return json.dumps(value, ensure_ascii=False)
    raise InvalidRequest(f"filter value for {op!r} must be a string, number, boolean or null",
                         field="filters")


def _compare(symbol: str, negate: bool = False) -> Callable[[str, Any], tuple[str, bool]]:
    def render(path: str, value: Any) -> tuple[str, bool]:
        return f"{path} ? (@ {symbol} {_scalar(value, symbol)})", negate
    return render


def _member(negate: bool) -> Callable[[str, Any], tuple[str, bool]]:
    def render(path: str, values: Any) -> tuple[str, bool]:
        if not isinstance(values, list) or not values or len(values) > 1000:
            raise InvalidRequest("'in' and 'nin' take a list of 1 to 1000 values", field="filters")
        alternatives = " || ".join(f"@ == {_scalar(v, 'in')}" for v in values)
        return f"{path} ? ({alternatives})", negate
    return render


def _exists(path: str, value: Any) -> tuple[str, bool]:
    if not isinstance(value, bool):
        raise InvalidRequest("'exists' takes true or false", field="filters")
    return path, not value


OPERATORS: dict[str, Operator] = {op.key: op for op in [
    Operator("eq", "equal to the value (for arrays: contains it)", _compare("==")),
    Operator("ne", "not equal, or the key is missing", _compare("==", negate=True)),
    Operator("gt", "greater than", _compare(">")),
    Operator("gte", "greater than or equal", _compare(">=")),
    Operator("lt", "less than", _compare("<")),
    Operator("lte", "less than or equal", _compare("<=")),
    Operator("in", "equal to one of a list", _member(negate=False)),
    Operator("nin", "equal to none of a list, or missing", _member(negate=True)),
    Operator("exists", "the key is present (true) or absent (false)", _exists),
]}


def _path(key: str) -> str:
    parts = key.split(".")
    if not key or any(not p for p in parts) or len(key) > 200:
        raise InvalidRequest(f"invalid filter key {shown(key)}", field="filters")
    return "$" + "".join("." + json.dumps(part, ensure_ascii=False) for part in parts)


class FilterCompiler:
    def __init__(self, column: sql.Composable, limits: FilterLimits = CEILING) -> None:
        self.column = column
        self.limits = limits
        self.params: dict[str, str] = {}

    def compile(self, node: Any, depth: int = 0) -> sql.Composable:
        if depth == 0:
            check_filter_size(node, self.limits)
        if depth > self.limits.depth:
            raise InvalidRequest(f"filter nests deeper than {self.limits.depth} levels",
                                 field="filters")
        if not isinstance(node, dict) or not node:
            raise InvalidRequest("a filter must be a non-empty JSON object", field="filters")
        parts = [self._entry(key, value, depth) for key, value in node.items()]
        return parts[0] if len(parts) == 1 else sql.SQL("({})").format(sql.SQL(" AND ").join(parts))

    def _entry(self, key: str, value: Any, depth: int) -> sql.Composable:
        if key in ("and", "or"):
            if not isinstance(value, list) or not value:
                raise InvalidRequest(f"{key!r} takes a non-empty list of filters", field="filters")
            joiner = sql.SQL(" AND " if key == "and" else " OR ")
            return sql.SQL("({})").format(joiner.join(self.compile(v, depth + 1) for v in value))
        if key == "not":
            return sql.SQL("NOT {}").format(self.compile(value, depth + 1))
        path = _path(key)
        if isinstance(value, dict):
            if not value:
                raise InvalidRequest(f"no operator given for {shown(key)}", field="filters")
            conditions = [self._condition(path, op, arg) for op, arg in value.items()]
            return conditions[0] if len(conditions) == 1 else sql.SQL("({})").format(
                sql.SQL(" AND ").join(conditions))
        return self._condition(path, "eq", value)

    def _condition(self, path: str, op: str, value: Any) -> sql.Composable:
        operator = OPERATORS.get(op)
        if operator is None:
            raise InvalidRequest(
                f"unknown filter operator {shown(op)}; use one of {', '.join(OPERATORS)}, "
                "or and/or/not", field="filters")
        if len(self.params) >= self.limits.conditions:
            raise InvalidRequest(f"a filter may hold at most {self.limits.conditions} conditions",
                                 field="filters")
        jsonpath, negate = operator.render(path, value)
        name = f"scope_filter_{len(self.params)}"
        self.params[name] = jsonpath
        condition = sql.SQL("{} @? {}::jsonpath").format(self.column, sql.Placeholder(name))
        return sql.SQL("NOT ({})").format(condition) if negate else condition


# What a reader holds: the held names plus the stored closure of each (migration 008).
RESOLVE_CLASSIFICATIONS = (
    "SELECT ARRAY(SELECT unnest(%(held)s::text[]) UNION SELECT unnest(c.closure)"
    " FROM pgbraid.classifications c WHERE c.name = ANY(%(held)s::text[]) ORDER BY 1)")

# Recompute every closure of the tenant (row-level security scopes it), after a change.
CLOSE_CLASSIFICATIONS = """
WITH RECURSIVE r(root, name) AS (
    SELECT name, name FROM pgbraid.classifications
    UNION
    SELECT r.root, unnest(c.implies) FROM pgbraid.classifications c JOIN r ON c.name = r.name)
UPDATE pgbraid.classifications c SET closure = s.closure
FROM (SELECT root, array_agg(DISTINCT name ORDER BY name) AS closure FROM r GROUP BY root) s
WHERE c.name = s.root AND c.closure IS DISTINCT FROM s.closure
"""


def resolve_classifications(conn: psycopg.Connection, held: tuple[str, ...]) -> tuple[str, ...]:
    """The held classifications plus everything they imply, transitively."""
    row = conn.execute(RESOLVE_CLASSIFICATIONS, {"held": list(held)}).fetchone()
    return tuple(row[0] or ())


@dataclass(frozen=True)
class Scope:
    pipeline_id: int
    classifications: tuple[str, ...]
    filters: dict[str, Any] | None = None
    as_of: datetime | None = None

    def where(self, alias: str = "f") -> tuple[sql.Composable, dict[str, Any]]:
        """(WHERE condition over fragment alias, named parameters)."""
        f = sql.Identifier(alias)
        params: dict[str, Any] = {
            "scope_pipeline": self.pipeline_id,
            "scope_classifications": list(self.classifications),
        }
        parts: list[sql.Composable] = [
            sql.SQL("{}.pipeline_id = %(scope_pipeline)s::bigint").format(f),
            sql.SQL("NOT {}.quarantined").format(f),
            sql.SQL("{}.classifications && %(scope_classifications)s::text[]").format(f),
        ]
        if self.as_of is None:
            parts.insert(1, sql.SQL("{}.current").format(f))
        else:
            # The versions valid at as_of: one per document, or none (ingest/clock.py).
            params["scope_as_of"] = self.as_of
            parts.insert(1, sql.SQL(
                "{}.version_id IN (SELECT v.id FROM pgbraid.versions v"
                " JOIN pgbraid.documents d ON d.pipeline_id = v.pipeline_id AND d.id = v.document_id"
                " WHERE d.pipeline_id = %(scope_pipeline)s::bigint"
                " AND v.valid_from <= %(scope_as_of)s"
                " AND (v.valid_to IS NULL OR v.valid_to > %(scope_as_of)s))").format(f))
        if self.filters:
            compiler = FilterCompiler(sql.SQL("{}.metadata").format(f))
            parts.append(compiler.compile(self.filters))
            params.update(compiler.params)
        return sql.SQL(" AND ").join(parts), params


    def partitions(self, alias: str = "p") -> tuple[sql.Composable, dict[str, Any]]:
        """(condition over bm25_partitions alias, parameters): the BM25 partitions whose
        statistics this scope may see, those whose classification set overlaps the
        resolved classifications (the same test ``where`` applies to fragments).

        Statistics (N, avgdl, df, text-search configurations) are sums over these
        partitions only, so nothing outside the scope moves them. Metadata filters
        and ``as_of`` stay checks on candidates; expired (and, once built,
        quarantined) fragments stop counting when they leave, at write time."""
        p = sql.Identifier(alias)
        return (sql.SQL("{}.pipeline_id = %(scope_pipeline)s::bigint"
                        " AND {}.classifications && %(scope_classifications)s::text[]").format(p, p),
                {"scope_pipeline": self.pipeline_id,
                 "scope_classifications": list(self.classifications)})


def validate_filters(filters: Any, limits: FilterLimits = FilterLimits()) -> None:
    """Compile once without a database to reject a bad filter before any statement is sent."""
    if filters is not None:
        FilterCompiler(sql.SQL("metadata"), limits).compile(filters)
