"""pgbraid extension build|list: PGXS sources compiled against the wheel's pg_config
into the data dir, loaded by the embedded server from there."""

from __future__ import annotations

import json
import shutil
import textwrap

import psycopg
import pytest
from typer.testing import CliRunner

from pgbraid.cli import app
from pgbraid.db import extensions
from pgbraid.db.server import bin_dir
from pgbraid.errors import InvalidRequest

runner = CliRunner()
needs_compiler = pytest.mark.skipif(shutil.which("gcc") is None or shutil.which("make") is None,
                                    reason="no gcc or make: extensions cannot be built here")


def _tiny_extension(folder, name="pgb_tiny", version="1.0", answer=42):
    """A minimal PGXS extension with one C function."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "Makefile").write_text(textwrap.dedent(f"""\
        MODULES = {name}
        EXTENSION = {name}
        DATA = {name}--{version}.sql
        PG_CONFIG ?= pg_config
        PGXS := $(shell $(PG_CONFIG) --pgxs)
        include $(PGXS)
        """))
    (folder / f"{name}.control").write_text(f"default_version = '{version}'\nrelocatable = true\n"
                                            f"module_pathname = '$libdir/{name}'\n")
    (folder / f"{name}--{version}.sql").write_text(
        f"CREATE FUNCTION {name}_answer() RETURNS int AS 'MODULE_PATHNAME' LANGUAGE C STRICT;\n")
    (folder / f"{name}.c").write_text(textwrap.dedent(f"""\
        #include "postgres.h"
        #include "fmgr.h"
        PG_MODULE_MAGIC;
        PG_FUNCTION_INFO_V1({name}_answer);
        Datum {name}_answer(PG_FUNCTION_ARGS) {{ PG_RETURN_INT32({answer}); }}
        """))
    return folder


@needs_compiler
def test_a_folder_source_builds_into_the_data_dir_and_the_server_loads_it(tmp_path, data_dir,
                                                                          server, superuser):
    source = _tiny_extension(tmp_path / "pgb_tiny")
    built = extensions.build(source, data_dir)
    assert (built.name, built.version, built.libraries) == ("pgb_tiny", "1.0", ["pgb_tiny.so"])
    assert (extensions.library_dir(data_dir) / "pgb_tiny.so").exists()
    assert (extensions.control_dir(data_dir) / "pgb_tiny.control").exists()
    assert not (bin_dir().parent / "lib" / "pgb_tiny.so").exists()  # not into site-packages
    assert not list(source.glob("*.o"))  # the caller's folder is not built in
    assert not built.restart_required and built.preload is None
    superuser.execute("CREATE EXTENSION pgb_tiny")
    try:
        assert superuser.execute("SELECT pgb_tiny_answer()").fetchone()[0] == 42
    finally:
        superuser.execute("DROP EXTENSION pgb_tiny")
    again = extensions.build(source, data_dir)
    assert again.cached and again.digest == built.digest
    assert [b.name for b in extensions.installed(data_dir)].count("pgb_tiny") == 1


@needs_compiler
def test_a_changed_source_is_rebuilt_not_served_from_the_cache(tmp_path, data_dir, server):
    first = extensions.build(_tiny_extension(tmp_path / "a" / "pgb_tiny2", "pgb_tiny2"), data_dir)
    second = extensions.build(_tiny_extension(tmp_path / "b" / "pgb_tiny2", "pgb_tiny2", "1.1"),
                              data_dir)
    assert not second.cached and second.digest != first.digest and second.version == "1.1"


def test_age_builds_from_the_vendored_tarball_and_is_listed(build_extension, data_dir, env,
                                                            superuser):
    built = build_extension("age")
    assert (built.name, built.version, built.preload) == ("age", "1.8.0", "session")
    assert extensions.build(built.source, data_dir).cached
    result = runner.invoke(app, ["extension", "list", "--json"], env=env)
    assert result.exit_code == 0, result.output
    rows = {r["name"]: r for r in json.loads(result.output)["extensions"]}
    assert rows["age"]["built"] == "1.8.0" and rows["age"]["available"] == "1.8.0"
    assert rows["pg_trgm"]["built"] is None and rows["pg_trgm"]["available"]


def test_server_settings_name_the_data_dir_folders_and_preloads(tmp_path):
    settings = extensions.server_settings(tmp_path)
    assert settings == {"extension_control_path": f"$system:{tmp_path}/extensions/share",
                        "dynamic_library_path": f"$libdir:{tmp_path}/extensions/lib"}
    manifest = {"pg_textsearch": {"name": "pg_textsearch", "version": "1.4.0",
                                  "extensions": ["pg_textsearch"], "libraries": ["pg_textsearch.so"],
                                  "preload": "shared", "source": "x", "digest": "d", "seconds": 1.0,
                                  "built_at": 0.0}}
    (tmp_path / "extensions").mkdir()
    (tmp_path / "extensions" / "built.json").write_text(json.dumps(manifest))
    assert extensions.server_settings(tmp_path)["shared_preload_libraries"] == "pg_textsearch"


@pytest.mark.parametrize("make_source, fragment", [
    (lambda p: p / "missing", "does not exist"),
    (lambda p: (p / "notes.txt", (p / "notes.txt").write_text("x"))[0], "neither a folder"),
    (lambda p: (p / "empty").mkdir() or p / "empty", "no Makefile"),
])
def test_bad_sources_are_refused_by_name(tmp_path, make_source, fragment):
    with pytest.raises(InvalidRequest, match=fragment):
        extensions.build(make_source(tmp_path), tmp_path / "data")


@needs_compiler
def test_a_source_that_fails_to_compile_says_so_and_installs_nothing(tmp_path, data_dir, env):
    source = _tiny_extension(tmp_path / "pgb_broken", "pgb_broken")
    (source / "pgb_broken.c").write_text("this is not C\n")
    result = runner.invoke(app, ["extension", "build", str(source), "--json"], env=env)
    assert result.exit_code == 2, result.output
    error = json.loads(result.output)["error"]
    assert error["code"] == "invalid_request" and "failed" in error["message"]
    assert not (extensions.control_dir(data_dir) / "pgb_broken.control").exists()
    assert "pgb_broken" not in {b.name for b in extensions.installed(data_dir)}


def test_extension_build_refuses_an_external_server(tmp_path):
    result = runner.invoke(app, ["extension", "build", str(tmp_path), "--json"],
                           env={"PGBRAID_DSN": "host=/nonexistent dbname=x"})
    assert result.exit_code == 2
    assert "PGBRAID_DSN" in json.loads(result.output)["error"]["message"]
