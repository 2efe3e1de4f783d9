"""Graph storage: bulk loading of vertices and edges, all or nothing.

Files are JSONL or TSV (gzipped or not):

    vertices.jsonl  {"type": "group", "key": "G0016", "label": "APT29", "documents": ["G0016"]}
    vertices.tsv    type  key  label  [document,document...]
    edges.jsonl     {"src_type": "group", "src": "G0016", "type": "uses",
                     "dst_type": "technique", "dst": "T1059", "weight": 1.0, "directed": true}
    edges.tsv       src_type  src  type  dst_type  dst  [weight]

Loading validates every line first (malformed lines, self-loops, duplicate
edges, endpoints that exist neither in the file nor in the pipeline) and
reports them with line numbers; then it upserts everything in one transaction,
so a load is visible whole or not at all, and loading the same file twice
changes nothing. Deleting a vertex deletes its edges. Every write to the edges
(these, cascaded deletes, SQL of your own) also keeps each vertex's edge count per
type and direction in pgbraid.vertex_degrees, by triggers in the same transaction
(migration 022): what `similar` reads to find and order hubs. Loads and deletes
also rebuild the packed lists and degrees of the vertices they touch (``packed``,
migration 047), in the same transaction.
"""

from __future__ import annotations

import gzip
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import psycopg

from ...errors import InvalidRequest, NotFound
from . import packed

MAX_REPORTED = 20
CHUNK = 50_000  # rows per statement: a large load stays in one transaction, each statement short


@dataclass
class GraphLoad:
    vertices: list[tuple] = field(default_factory=list)   # (type, key, label, documents)
    edges: list[tuple] = field(default_factory=list)      # (src_type, src, type, dst_type, dst, weight, directed, line)
    errors: list[str] = field(default_factory=list)


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                if line.strip() and not line.startswith("#"):
                    yield number, line.rstrip("\n")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidRequest(f"cannot read {path}: {exc}") from None


def _is_jsonl(path: Path) -> bool:
    return ".jsonl" in path.name or ".ndjson" in path.name


def read_vertices(path: Path, load: GraphLoad) -> None:
    for number, line in _lines(path):
        where = f"{path.name}:{number}"
        try:
            if _is_jsonl(path):
                record = json.loads(line)
                if not isinstance(record, dict):
                    raise ValueError("not a JSON object")
                vtype, key, label = record.get("type"), record.get("key"), record.get("label")
                documents = record.get("documents") or []
            else:
                parts = line.split("\t")
                if parts[:2] == ["type", "key"]:
                    continue  # header
                if len(parts) < 2:
                    raise ValueError("expected type, key[, label[, documents]]")
                vtype, key = parts[0], parts[1]
                label = parts[2] if len(parts) > 2 else None
                documents = [d for d in parts[3].split(",") if d] if len(parts) > 3 else []
            if not isinstance(vtype, str) or not vtype or not isinstance(key, (str, int)) or key == "":
                raise ValueError("type and key are required")
            if not isinstance(documents, list) or not all(isinstance(d, str) for d in documents):
                raise ValueError("documents must be a list of document ids")
            load.vertices.append((vtype, str(key), label, documents))
        except (ValueError, json.JSONDecodeError) as exc:
            load.errors.append(f"{where}: {exc}")


def read_edges(path: Path, load: GraphLoad) -> None:
    for number, line in _lines(path):
        where = f"{path.name}:{number}"
        try:
            if _is_jsonl(path):
                r = json.loads(line)
                if not isinstance(r, dict):
                    raise ValueError("not a JSON object")
                fields = (r.get("src_type"), r.get("src"), r.get("type"), r.get("dst_type"), r.get("dst"))
                weight, directed = r.get("weight", 1.0), r.get("directed", True)
            else:
                parts = line.split("\t")
                if parts[:2] == ["src_type", "src"]:
                    continue  # header
                if len(parts) not in (5, 6):
                    raise ValueError(f"expected 5 or 6 tab-separated fields, got {len(parts)}")
                fields = tuple(parts[:5])
                weight, directed = (float(parts[5]) if len(parts) == 6 else 1.0), True
            if not all(isinstance(f, (str, int)) and str(f) for f in fields):
                raise ValueError("src_type, src, type, dst_type and dst are required")
            if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight):
                raise ValueError("weight must be a finite number")
            src_type, src, etype, dst_type, dst = (str(f) for f in fields)
            if (src_type, src) == (dst_type, dst):
                raise ValueError(f"self-loop on {src_type}:{src}")
            load.edges.append((src_type, src, etype, dst_type, dst, float(weight), bool(directed), where))
        except (ValueError, json.JSONDecodeError) as exc:
            load.errors.append(f"{where}: {exc}")


def from_records(vertices: list[tuple] = (), edges: list[tuple] = ()) -> GraphLoad:
    """In-memory vertices (type, key, label, documents) and edges (src_type, src, type,
    dst_type, dst[, weight[, directed]]), checked like the lines of a file."""
    data = GraphLoad(vertices=[(t, str(k), label, list(d)) for t, k, label, d in vertices])
    for n, edge in enumerate(edges, start=1):
        weight = float(edge[5]) if len(edge) > 5 else 1.0
        directed = bool(edge[6]) if len(edge) > 6 else True
        if (edge[0], str(edge[1])) == (edge[3], str(edge[4])):
            data.errors.append(f"record {n}: self-loop on {edge[0]}:{edge[1]}")
        if not math.isfinite(weight):
            data.errors.append(f"record {n}: weight must be a finite number")
        data.edges.append((edge[0], str(edge[1]), edge[2], edge[3], str(edge[4]), weight,
                           directed, f"record {n}"))
    return data


def _check_duplicates(load: GraphLoad) -> None:
    seen: dict[tuple, str] = {}
    for edge in load.edges:
        key = edge[:5]
        if key in seen:
            load.errors.append(f"{edge[7]}: duplicate edge (first at {seen[key]})")
        else:
            seen[key] = edge[7]


def _version(conn: psycopg.Connection, pipeline_id: int) -> int:
    """The pipeline's graph version (bumped by triggers on every write: migration 021)."""
    row = conn.execute("SELECT version FROM pgbraid.graph_versions WHERE pipeline_id = %s",
                       (pipeline_id,)).fetchone()
    return row[0] if row else 0


def load(conn: psycopg.Connection, pipeline_id: int, data: GraphLoad, *,
         age: bool = False) -> dict[str, int]:
    """Upsert a validated load inside the caller's transaction (and into the pipeline's
    Apache AGE mirror when ``age``, PGBRAID_AGE=1, and the mirror is current)."""
    current = packed.lock(conn, pipeline_id)
    before = _version(conn, pipeline_id)
    counts, vertex_ids, edge_ids, written = _upsert(conn, pipeline_id, data)
    touched = {s for s, _, _ in written} | {d for _, _, d in written}
    packed.repack(conn, pipeline_id, touched if current else None, added=written)
    after = _version(conn, pipeline_id)
    if age:
        from .age import sync_load

        sync_load(conn, pipeline_id, before, after, vertex_ids, edge_ids)
    return counts


def _upsert(conn: psycopg.Connection, pipeline_id: int,
            data: GraphLoad) -> tuple[dict[str, int], list[int], list[int], list[tuple]]:
    """Counts, the ids of the vertices and edges written, and the edges (src, type, dst)."""
    _check_duplicates(data)
    if data.errors:
        raise InvalidRequest(f"{len(data.errors)} bad line(s), nothing loaded: "
                             + "; ".join(data.errors[:3]), errors=data.errors[:MAX_REPORTED])
    vertex_ids: list[int] = []
    for start in range(0, len(data.vertices), CHUNK):
        types, keys, labels, documents = zip(*data.vertices[start:start + CHUNK])
        vertex_ids += [r[0] for r in conn.execute(
            "INSERT INTO pgbraid.vertices (pipeline_id, type, key, label, documents)"
            " SELECT %(p)s, t, k, l, string_to_array(d, E'\\x1f') FROM unnest(%(types)b::text[],"
            " %(keys)b::text[], %(labels)b::text[], %(docs)b::text[]) AS x(t, k, l, d)"
            " ON CONFLICT (pipeline_id, type, key) DO UPDATE SET label = EXCLUDED.label,"
            " documents = EXCLUDED.documents RETURNING id",
            {"p": pipeline_id, "types": list(types), "keys": list(keys), "labels": list(labels),
             "docs": ["\x1f".join(d) for d in documents]})]
    if not data.edges:
        return {"vertices": len(data.vertices), "edges": 0}, vertex_ids, [], []
    ends = {(e[0], e[1]) for e in data.edges} | {(e[3], e[4]) for e in data.edges}
    types, keys = zip(*ends)
    ids = {(t, k): i for t, k, i in conn.execute(
        "SELECT v.type, v.key, v.id FROM pgbraid.vertices v JOIN unnest(%(t)b::text[], %(k)b::text[])"
        " AS x(t, k) ON v.type = x.t AND v.key = x.k WHERE v.pipeline_id = %(p)s",
        {"p": pipeline_id, "t": list(types), "k": list(keys)})}
    missing = [f"{e[7]}: unknown vertex {t}:{k}" for e in data.edges
               for t, k in ((e[0], e[1]), (e[3], e[4])) if (t, k) not in ids]
    if missing:
        raise InvalidRequest(f"{len(missing)} edge endpoint(s) are not vertices, nothing loaded: "
                             + "; ".join(missing[:3]), errors=missing[:MAX_REPORTED])
    edge_ids: list[int] = []
    written = [(ids[(e[0], e[1])], e[2], ids[(e[3], e[4])]) for e in data.edges]
    for start in range(0, len(data.edges), CHUNK):
        edges = data.edges[start:start + CHUNK]
        part = written[start:start + CHUNK]
        edge_ids += [r[0] for r in conn.execute(
            "INSERT INTO pgbraid.edges (pipeline_id, src, type, dst, weight, directed)"
            " SELECT %(p)s, s, t, d, w, dir FROM unnest(%(s)b::bigint[], %(t)b::text[],"
            " %(d)b::bigint[], %(w)b::float8[], %(dir)b::bool[]) AS x(s, t, d, w, dir)"
            " ON CONFLICT (pipeline_id, src, type, dst) DO UPDATE SET weight = EXCLUDED.weight,"
            " directed = EXCLUDED.directed RETURNING id",
            {"p": pipeline_id, "s": [w[0] for w in part], "t": [w[1] for w in part],
             "d": [w[2] for w in part], "w": [e[5] for e in edges], "dir": [e[6] for e in edges]})]
    return {"vertices": len(data.vertices), "edges": len(data.edges)}, vertex_ids, edge_ids, written


def delete_vertex(conn: psycopg.Connection, pipeline_id: int, vtype: str, key: str, *,
                  age: bool = False) -> None:
    """Delete a vertex and its edges (from the AGE mirror too when ``age`` and it is current)."""
    current = packed.lock(conn, pipeline_id)
    before = _version(conn, pipeline_id)
    edges = conn.execute(  # the vertex's edges, both ways: their ends' lists lose them
        "WITH v AS (SELECT id FROM pgbraid.vertices WHERE pipeline_id = %(p)s AND type = %(t)s"
        " AND key = %(k)s) SELECT e.src, e.type, e.dst FROM pgbraid.edges e, v WHERE"
        " e.pipeline_id = %(p)s AND e.src = v.id UNION ALL SELECT e.src, e.type, e.dst FROM"
        " pgbraid.edges e, v WHERE e.pipeline_id = %(p)s AND e.dst = v.id",
        {"p": pipeline_id, "t": vtype, "k": key}).fetchall()
    row = conn.execute("DELETE FROM pgbraid.vertices WHERE pipeline_id = %s AND type = %s AND key = %s"
                       " RETURNING id", (pipeline_id, vtype, key)).fetchone()
    if row is None:
        raise NotFound(f"vertex {vtype}:{key} does not exist")
    ends = {s for s, _, _ in edges} | {d for _, _, d in edges} | {row[0]}
    packed.repack(conn, pipeline_id, ends if current else None, removed=edges)
    after = _version(conn, pipeline_id)
    if age:
        from .age import sync_delete

        sync_delete(conn, pipeline_id, before, after, row[0])


def summary(conn: psycopg.Connection, pipeline_id: int) -> dict[str, Any]:
    vertices = dict(conn.execute("SELECT type, count(*) FROM pgbraid.vertices WHERE pipeline_id = %s"
                                 " GROUP BY type ORDER BY type", (pipeline_id,)).fetchall())
    edges = dict(conn.execute("SELECT type, count(*) FROM pgbraid.edges WHERE pipeline_id = %s"
                              " GROUP BY type ORDER BY type", (pipeline_id,)).fetchall())
    return {"vertices": vertices, "edges": edges}
