"""pgbraid's schema distributed on a Citus coordinator (db/distribute.py): a local
cluster (coordinator + 2 workers from the wheel, Unix sockets only) started here, with
Citus built from ../shared/vendor (cached: conftest.citus_build; skipped where it
cannot be built). The core suites run against a coordinator too, with
PGBRAID_TEST_CITUS=1 (conftest.py; README, "Citus")."""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

import pgbraid
from pgbraid.db.cluster import LocalCluster
from pgbraid.db.migrations import migrate
from pgbraid.errors import BackendUnavailable, row_of

from .conftest import citus_build

LOGGED = " options='-c citus.log_remote_commands=on -c log_min_messages=notice'"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cluster = LocalCluster(citus_build(), folder=tmp_path_factory.mktemp("citus") / "nodes")
    status = cluster.start(2)
    yield cluster, status
    cluster.stop()


@pytest.fixture(scope="module")
def coordinator(cluster) -> str:
    _, status = cluster
    with pgbraid.connect(dsn=status["coordinator"]["dsn"]) as client:
        client.pipelines()  # migrates and distributes
    return status["coordinator"]["dsn"]


def _pipeline(dsn: str, tenant: str = "default", **kwargs) -> tuple[str, int]:
    name = f"c-{uuid.uuid4().hex[:8]}"
    with pgbraid.connect(dsn=dsn, tenant=tenant) as client:
        client.create_pipeline(name, embedder="none")
        client.ingest(name, [{"id": "a", "text": "reactor coolant maintenance", **kwargs},
                             {"id": "b", "text": "turbine blade inspection"}])
    with psycopg.connect(dsn) as conn:
        return name, conn.execute("SELECT id FROM pgbraid.pipelines WHERE name = %s",
                                  (name,)).fetchone()[0]


def _home(conn: psycopg.Connection, pipeline_id: int) -> tuple[str, int]:
    """The worker (socket folder, port) holding the pipeline's fragments."""
    return conn.execute(
        "SELECT nodename, nodeport FROM citus_shards WHERE shardid ="
        " get_shard_id_for_distribution_column('pgbraid.fragments', %s)", (pipeline_id,)).fetchone()


def test_every_pipeline_table_is_distributed_by_pipeline_and_co_located(coordinator):
    with psycopg.connect(coordinator) as conn:
        rows = conn.execute(
            "SELECT c.relname, d.partmethod, d.colocationid, EXISTS (SELECT 1 FROM pg_attribute a"
            " WHERE a.attrelid = c.oid AND a.attname = 'pipeline_id' AND NOT a.attisdropped)"
            " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " LEFT JOIN pg_dist_partition d ON d.logicalrelid = c.oid"
            " WHERE n.nspname = 'pgbraid' AND c.relkind = 'r'").fetchall()
    kinds = {name: (method, colocation, keyed) for name, method, colocation, keyed in rows}
    assert kinds.pop("schema_migrations")[0] is None  # the coordinator's own
    distributed = {n: c for n, (m, c, keyed) in kinds.items() if keyed}
    assert {"fragments", "versions", "documents", "bm25_postings", "bm25_partition_stats",
            "embeddings", "edges"} <= set(distributed)
    assert all(kinds[n][0] == "h" for n in distributed)
    assert len(set(distributed.values())) == 1  # one shard group per pipeline
    reference = [n for n, (m, c, keyed) in kinds.items() if not keyed]
    assert {"pipelines", "classifications", "api_keys", "audit_log"} <= set(reference)
    assert all(kinds[n][0] == "n" for n in reference)


def test_a_table_a_later_migration_adds_is_distributed_on_the_next_connect(coordinator):
    with psycopg.connect(coordinator) as conn:
        # (a key to a distributed table comes in the next migration: see distribute.py)
        conn.execute("CREATE TABLE pgbraid.later_owned (id bigint PRIMARY KEY,"
                     " pipeline_id bigint NOT NULL REFERENCES pgbraid.pipelines ON DELETE CASCADE,"
                     " fragment_id bigint)")
        conn.execute("CREATE TABLE pgbraid.later_wide (tenant_id text PRIMARY KEY)")
        conn.commit()
        try:
            migrate(conn)
            conn.commit()
            kinds = dict(conn.execute(
                "SELECT logicalrelid::regclass::text, partmethod FROM pg_dist_partition"
                " WHERE logicalrelid::regclass::text LIKE 'pgbraid.later_%'").fetchall())
            assert kinds == {"pgbraid.later_owned": "h", "pgbraid.later_wide": "n"}
            key = conn.execute("SELECT pg_get_constraintdef(oid) FROM pg_constraint"
                               " WHERE conrelid = 'pgbraid.later_owned'::regclass AND contype = 'p'"
                               ).fetchone()[0]
            assert key == "PRIMARY KEY (pipeline_id, id)"
            conn.execute("ALTER TABLE pgbraid.later_owned ADD FOREIGN KEY (pipeline_id, fragment_id)"
                         " REFERENCES pgbraid.fragments (pipeline_id, id)")  # co-located: allowed
        finally:
            conn.rollback()
            conn.execute("DROP TABLE pgbraid.later_owned, pgbraid.later_wide")
            conn.commit()


def test_the_tenant_policy_holds_on_the_worker_that_holds_the_rows(cluster, coordinator):
    """Citus copies the policies to the shards: read the shard on its worker as the app
    role, as the coordinator's sessions do (SET LOCAL, propagated)."""
    nodes, status = cluster
    tenant = f"t{uuid.uuid4().hex[:6]}"
    _, pipeline_id = _pipeline(coordinator, tenant)
    with psycopg.connect(coordinator) as conn:
        host, port = _home(conn, pipeline_id)
        shard = conn.execute("SELECT shard_name FROM citus_shards WHERE shardid ="
                             " get_shard_id_for_distribution_column('pgbraid.fragments', %s)",
                             (pipeline_id,)).fetchone()[0]
    with psycopg.connect(host=host, port=port, user="postgres", dbname="postgres") as worker:
        table = sql.Identifier(*shard.split("."))
        assert worker.execute("SELECT count(*) FROM pg_policy WHERE polrelid = %s::regclass",
                              (shard,)).fetchone()[0] >= 1
        seen = {}
        for who in (tenant, "someone-else", None):
            with worker.transaction():
                worker.execute("SET LOCAL ROLE pgbraid_app")
                if who:
                    worker.execute("SELECT set_config('pgbraid.tenant', %s, true)", (who,))
                seen[who] = worker.execute(sql.SQL("SELECT count(*) FROM {} WHERE pipeline_id = %s")
                                           .format(table), (pipeline_id,)).fetchone()[0]
    assert seen == {tenant: 2, "someone-else": 0, None: 0}


def test_two_tenants_see_only_their_own_on_the_coordinator(coordinator):
    first, second = f"t{uuid.uuid4().hex[:6]}", f"t{uuid.uuid4().hex[:6]}"
    mine, _ = _pipeline(coordinator, first)
    _pipeline(coordinator, second)
    with pgbraid.connect(dsn=coordinator, tenant=second) as other:
        assert mine not in [p.name for p in other.pipelines()]
    with pgbraid.connect(dsn=coordinator, tenant=first) as client:
        for kind in ("bm25", "fulltext", "fuzzy", "hybrid"):
            assert [h.document_id for h in client.search(mine, "reactor", type=kind).hits] == ["a"]


def _remote_servers(log: Path, since: int) -> set[str]:
    return set(re.findall(r"DETAIL:  on server pgbraid_app@(\S+) connectionId",
                          log.read_text(errors="replace")[since:]))


def test_a_search_for_one_pipeline_touches_its_worker_only(cluster, coordinator):
    """Every statement the coordinator sends a worker for a search (Citus logs each,
    with the server), for two pipelines on different workers."""
    nodes, status = cluster
    log = Path(status["coordinator"]["data_dir"]) / "server.log"
    homes = {}
    with psycopg.connect(coordinator) as conn:
        while len(set(homes.values())) < 2:
            name, pipeline_id = _pipeline(coordinator)
            host, port = _home(conn, pipeline_id)
            homes[name] = f"{host}:{port}"
    with pgbraid.connect(dsn=coordinator + LOGGED) as client:
        for name, home in homes.items():
            for kind in ("bm25", "fulltext", "fuzzy", "hybrid"):
                since = log.stat().st_size
                assert [h.document_id for h in client.search(name, "reactor", type=kind).hits] == ["a"]
                assert _remote_servers(log, since) == {home}, (name, kind)


def test_a_worker_down_mid_search_is_a_503_naming_it_and_no_answer(cluster, coordinator):
    nodes, status = cluster
    with psycopg.connect(coordinator) as conn:
        while True:
            name, pipeline_id = _pipeline(coordinator)
            host, port = _home(conn, pipeline_id)
            node = conn.execute("SELECT nodeid FROM pg_dist_node WHERE nodename = %s"
                                " AND nodeport = %s", (host, port)).fetchone()[0]
            worker = next(w["name"] for w in status["workers"] if f"host={host} " in w["dsn"])
            if worker == "worker2":
                break
    with pgbraid.connect(dsn=coordinator) as client:
        assert client.search(name, "reactor", type="bm25").hits  # the pool is warm
        nodes.node(worker).stop()
        try:
            for kind in ("bm25", "hybrid"):
                with pytest.raises(BackendUnavailable, match=f"Citus worker node {node} ") as exc:
                    client.search(name, "reactor", type=kind)
                assert exc.value.details["workers"] == [node]
                assert host not in exc.value.message  # where it is goes to the log only
            assert row_of(BackendUnavailable).status == 503
        finally:
            nodes.node(worker).start()
        assert client.search(name, "reactor", type="hybrid").hits


def test_the_app_role_logs_in_to_the_workers_only_on_citus(coordinator, client, superuser):
    """pgbraid_app is NOLOGIN on a plain server; Citus connects as it to the workers."""
    with psycopg.connect(coordinator) as conn:
        assert conn.execute("SELECT rolcanlogin FROM pg_roles WHERE rolname = 'pgbraid_app'"
                            ).fetchone()[0]
    if os.environ.get("PGBRAID_TEST_CITUS") in (None, "", "0"):
        client.pipelines()  # the plain server migrated (its roles made) before looking
        assert not superuser.execute("SELECT rolcanlogin FROM pg_roles"
                                     " WHERE rolname = 'pgbraid_app'").fetchone()[0]
