"""``pgbraid cluster start``: a Citus coordinator and two workers from the wheel, over
Unix sockets only. Citus is built from ../shared/vendor into PGBRAID_TEST_CITUS_DIR
(default /tmp/pgbraid-test-citus; cached there: the first build takes 4-12 minutes
on 2 cores); the tests skip where it cannot be built.

These tests cover the cluster, pgbraid migrating (and distributing its schema)
and searching on its coordinator, and the refusals; tests/test_citus.py covers the
distributed schema."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

import pgbraid
from pgbraid.db.cluster import LocalCluster
from pgbraid.db.server import EmbeddedServer
from pgbraid.errors import BackendUnavailable, InvalidRequest, NotEnabled

from .conftest import citus_build

@pytest.fixture(scope="module")
def citus_dir() -> Path:
    return citus_build()  # a no-op once built


@pytest.fixture(scope="module")
def cluster(citus_dir):
    env = {**os.environ, "PGBRAID_DATA_DIR": str(citus_dir)}
    env.pop("PGBRAID_DSN", None)
    started = subprocess.run([sys.executable, "-m", "pgbraid", "cluster", "start", "--workers",
                              "2", "--json"], env=env, capture_output=True, text=True, timeout=300)
    assert started.returncode == 0, started.stdout + started.stderr
    yield json.loads(started.stdout)
    subprocess.run([sys.executable, "-m", "pgbraid", "cluster", "stop", "--json"], env=env,
                   capture_output=True, timeout=300)


def test_a_coordinator_and_two_workers_on_sockets_only(cluster):
    assert cluster["active_workers"] == 2
    assert [w["name"] for w in cluster["workers"]] == ["worker1", "worker2"]
    for node in [cluster["coordinator"], *cluster["workers"]]:
        with psycopg.connect(node["dsn"]) as conn:
            assert conn.execute("SHOW listen_addresses").fetchone()[0] == ""  # no TCP at all
            assert "citus" in conn.execute("SHOW shared_preload_libraries").fetchone()[0]


def test_two_pipelines_land_on_different_workers_and_each_query_touches_one(cluster):
    table = f"by_pipeline_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(cluster["coordinator"]["dsn"], autocommit=True) as conn:
        ident = sql.Identifier(table)
        conn.execute(sql.SQL("CREATE TABLE {} (pipeline_id bigint, body text)").format(ident))
        try:
            conn.execute("SELECT create_distributed_table(%s, 'pipeline_id')", (table,))
            conn.execute(sql.SQL("INSERT INTO {} SELECT i, 'x' FROM generate_series(1, 32) i")
                         .format(ident))
            homes = dict(conn.execute(
                "SELECT i, (SELECT nodename FROM citus_shards WHERE shardid ="
                " get_shard_id_for_distribution_column(%s, i)) FROM generate_series(1, 32) i",
                (table,)).fetchall())
            first = 1
            second = next(i for i, node in homes.items() if node != homes[first])
            for pipeline in (first, second):
                plan = "\n".join(r[0] for r in conn.execute(sql.SQL(
                    "EXPLAIN SELECT * FROM {} WHERE pipeline_id = {}").format(
                        ident, sql.Literal(pipeline))))
                assert "Task Count: 1" in plan
                assert re.search(r"Node: host=(\S+)", plan).group(1) == homes[pipeline]
            assert homes[first] != homes[second]
        finally:
            conn.execute(sql.SQL("DROP TABLE {}").format(ident))


def test_pgbraid_migrates_and_searches_on_the_coordinator(cluster):
    with pgbraid.connect(dsn=cluster["coordinator"]["dsn"]) as client:
        name = f"t-{uuid.uuid4().hex[:10]}"
        client.create_pipeline(name, embedder="none")
        client.ingest(name, [{"id": "a", "text": "coordinator reactor maintenance"}])
        for kind in ("bm25", "fulltext", "fuzzy", "hybrid"):
            assert [h.document_id for h in client.search(name, "reactor", type=kind).hits] == ["a"]
        client.delete_pipeline(name)


def test_a_coordinator_without_workers_is_refused(citus_dir, tmp_path_factory):
    lonely = EmbeddedServer(tmp_path_factory.mktemp("lonely"))
    lonely.extensions_dir = citus_dir
    dsn = lonely.start().dsn
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION citus")
        with pgbraid.connect(dsn=dsn) as client:
            with pytest.raises(BackendUnavailable, match="Citus coordinator without active workers"):
                client.pipelines()
    finally:
        lonely.stop()


def test_cluster_start_needs_citus_built_and_a_sane_worker_count(tmp_path):
    with pytest.raises(NotEnabled, match="extension build"):
        LocalCluster(tmp_path).start(2)
    with pytest.raises(InvalidRequest, match="workers"):
        LocalCluster(tmp_path).start(0)


def test_a_tenant_policy_holds_on_the_workers_only_when_set_local(cluster):
    """What the distributed pgbraid schema relies on (docs/scale.md): with
    citus.propagate_set_commands = 'local', SET LOCAL of the tenant and role reaches
    the workers (so pgbraid's sessions use it: transaction_settings.set_local); set_config(...,
    true) does not (the workers see no tenant: zero rows, failing closed)."""
    table, role = f"tenanted_{uuid.uuid4().hex[:8]}", f"reader_{uuid.uuid4().hex[:8]}"
    ident, who = sql.Identifier(table), sql.Identifier(role)
    with psycopg.connect(cluster["coordinator"]["dsn"], autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(who))  # Citus logs in as it
        conn.execute(sql.SQL("CREATE TABLE {} (pipeline_id bigint, tenant text)").format(ident))
        try:
            conn.execute("SELECT create_distributed_table(%s, 'pipeline_id')", (table,))
            conn.execute(sql.SQL("INSERT INTO {} SELECT i % 4, CASE WHEN i % 2 = 0 THEN 't1'"
                                 " ELSE 't2' END FROM generate_series(1, 40) i").format(ident))
            for statement in ("ALTER TABLE {} ENABLE ROW LEVEL SECURITY",
                              "ALTER TABLE {} FORCE ROW LEVEL SECURITY",
                              "CREATE POLICY tenant ON {} USING (tenant = current_setting("
                              "'app.tenant', true))"):
                conn.execute(sql.SQL(statement).format(ident))
            conn.execute(sql.SQL("GRANT SELECT ON {} TO {}").format(ident, who))
            conn.execute("SET citus.propagate_set_commands = 'local'")

            def seen(*setup) -> list:
                with conn.transaction():
                    for statement in setup:
                        conn.execute(statement)
                    rows = conn.execute(sql.SQL("SELECT tenant, count(*) FROM {} GROUP BY 1")
                                        .format(ident)).fetchall()
                    assert conn.execute("SELECT current_user").fetchone()[0] == role
                    return rows

            assert seen(sql.SQL("SET LOCAL app.tenant = 't1'"),
                        sql.SQL("SET LOCAL role {}").format(who)) == [("t1", 20)]
            assert seen(sql.SQL("SELECT set_config('app.tenant', 't1', true),"
                                " set_config('role', {}, true)").format(sql.Literal(role))) == []
        finally:
            conn.execute(sql.SQL("DROP TABLE {}").format(ident))
            conn.execute(sql.SQL("DROP ROLE {}").format(who))


def test_a_distributed_schema_upgrades_through_every_later_migration(citus_dir, tmp_path):
    """A coordinator whose schema was distributed by an older pgbraid (here: migrated up to
    030, when distribution came, and distributed) takes every later migration: a DDL
    statement on a distributed or reference table is sent on to the workers, which refuse
    a multi-statement string (migration 044 did that before it was one DO block)."""
    from pgbraid.db.migrations import migrate, migration_files

    cluster = LocalCluster(citus_dir, folder=tmp_path / "nodes")
    status = cluster.start(workers=1)
    try:
        with psycopg.connect(status["coordinator"]["dsn"], autocommit=True) as conn:
            migrate(conn, until=30)
            assert conn.execute("SELECT count(*) FROM pg_dist_partition").fetchone()[0] > 0
            later = migrate(conn)
        assert later == [name for version, name, _ in migration_files() if version > 30]
        with pgbraid.connect(dsn=status["coordinator"]["dsn"]) as client:
            name = f"u-{uuid.uuid4().hex[:10]}"
            client.create_pipeline(name, embedder="none")
            client.ingest(name, [{"id": "a", "text": "upgraded reactor maintenance"}])
            assert [h.document_id for h in client.search(name, "reactor", type="bm25").hits] == ["a"]
    finally:
        cluster.stop()
