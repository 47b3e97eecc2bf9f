"""mzflow as an installed Airflow provider (issue 36, items 4 and 5).

In process: ``get_provider_info`` against Airflow's own schemas, the ``mzflow`` URI
normalizer, ``mzflow airflow init``, and the lineage each operator reports, read from
the catalog. Through a real Airflow 3 in child processes: its CLI finds the provider,
the connection type and the plugin from pyproject's entry points alone (exactly one
copy of them: see ``_python_path``), lists the clusters' DAGs after ``mzflow airflow
init``, and ``dag.test()`` with the OpenLineage provider's file transport writes events
that name the tables, the index and the columns.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from mzflow_dev.airflow_server import airflow_in_process, throwaway_airflow_home

# Unless test_airflow.py's throwaway home is already in place (its tests need it kept).
_OWN_HOME = throwaway_airflow_home("provider-")

from scenario import expect_result  # noqa: E402

import mzflow  # noqa: E402
from mzflow import cli  # noqa: E402
from mzflow.airflow import install, lineage, provider, uris  # noqa: E402
from mzflow_dev.airflow_server import airflow_env  # noqa: E402

pytestmark = pytest.mark.airflow

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
AIRFLOW = str(Path(sys.executable).parent / "airflow")

CATALOG = """
CREATE CLUSTER etl SIZE 'small';
CREATE TABLE orders (id int, cust text, amount numeric(10,2));
CREATE TABLE custs (cust text, region text);
CREATE MATERIALIZED VIEW totals IN CLUSTER etl AS
  SELECT c.region, sum(o.amount) AS total, count(*) AS n
  FROM orders o JOIN custs c ON o.cust = c.cust GROUP BY c.region;
CREATE VIEW big AS WITH t AS (SELECT region, total FROM totals WHERE n > 1)
  SELECT region AS area, total * 2 AS dbl FROM t;
CREATE INDEX big_idx IN CLUSTER etl ON big (area);
CREATE SINK out IN CLUSTER etl FROM totals INTO CSV '{out}';
"""


@pytest.fixture(scope="module", autouse=True)
def _remove_own_home() -> Iterator[None]:
    with airflow_in_process(_OWN_HOME):
        yield


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    h = tmp_path_factory.mktemp("provider") / "home"
    with mzflow.connect(str(h)) as conn:
        conn.execute(CATALOG.format(out=h.parent / "out"))
    return h


# -- get_provider_info ----------------------------------------------------------------------

def _schema(name: str) -> dict[str, object]:
    import airflow

    return json.loads((Path(airflow.__file__).parent / name).read_text())  # type: ignore[no-any-return]


def test_provider_info_is_valid_for_airflow_and_names_this_distribution() -> None:
    import jsonschema

    info = provider.get_provider_info()
    jsonschema.validate(info, _schema("provider_info.schema.json"))
    # ProvidersManager refuses a provider whose package-name is not its distribution's.
    assert info["package-name"] == PYPROJECT["project"]["name"]
    eps = PYPROJECT["project"]["entry-points"]
    assert eps["apache_airflow_provider"] == {
        "provider_info": "mzflow.airflow.provider:get_provider_info"}
    assert eps["airflow.plugins"] == {"mzflow": "mzflow.airflow.plugin:MzflowPlugin"}


def test_every_name_the_provider_lists_imports() -> None:
    from airflow.sdk import BaseHook, BaseOperator

    from mzflow.airflow import hooks, operators
    from mzflow.airflow.plugin import MzflowPlugin

    info = provider.get_provider_info()
    modules = [m for key in ("operators", "hooks") for entry in info[key]
               for m in entry["python-modules"]]
    assert modules == ["mzflow.airflow.operators", "mzflow.airflow.hooks"]
    assert {n for n in dir(operators) if n.startswith("Mzflow") and issubclass(
        getattr(operators, n), BaseOperator)} >= {"MzflowTickOperator", "MzflowSinkOperator"}
    (conn,) = info["connection-types"]
    assert conn["hook-class-name"] == "mzflow.airflow.hooks.MzflowHook"
    assert issubclass(hooks.MzflowHook, BaseHook)
    assert hooks.MzflowHook.conn_type == conn["connection-type"] == "mzflow"
    assert hooks.MzflowSparkHook is hooks.MzflowHook  # the old name still imports
    assert hooks.MzflowHook.default_conn_name == "mzflow_spark"  # the old id still works
    (uri,) = info["asset-uris"]
    assert uri["schemes"] == ["mzflow"]
    from airflow.sdk.module_loading import import_string

    for key in ("handler", "factory", "to_openlineage_converter"):
        assert callable(import_string(uri[key]))
    assert MzflowPlugin.name == "mzflow"


def test_connection_form_fields_follow_airflow3s_conventions() -> None:
    import jsonschema

    (conn,) = provider.get_provider_info()["connection-types"]
    assert set(conn["conn-fields"]) == {"home", "catalog_url"}
    for f in conn["conn-fields"].values():
        assert f["label"] and f["schema"]["type"] == ["string", "null"]
    ui = conn["ui-field-behaviour"]
    # ProvidersManager turns the kebab-case keys into these before validating.
    jsonschema.validate({"hidden_fields": ui["hidden-fields"], "relabeling": ui["relabeling"],
                         "placeholders": ui["placeholders"]},
                        _schema("customized_form_field_behaviours.schema.json"))
    assert "host" not in ui["hidden-fields"] and "port" not in ui["hidden-fields"]
    assert "Spark" in ui["relabeling"]["host"]


def test_master_url_reads_the_mzflow_type_as_spark_does() -> None:
    from mzflow.airflow.hooks import master_url

    assert master_url("mzflow", "spark://m", 7077, {}) == "spark://m:7077"
    assert master_url("mzflow", "sc://m", None, {"token": "x"}) == "sc://m:15002/;token=x"
    assert master_url("mzflow", "", None, {"home": "/h"}) == "local[*]"
    assert master_url("spark", "m", 7077, {}) == "spark://m:7077"


# -- the mzflow URI scheme ------------------------------------------------------------------

@pytest.mark.parametrize("uri,normal", [
    ("mzflow://ABC-1/materialize.public.v_idx", "mzflow://abc-1/materialize.public.v_idx"),
    ("mzflow://abc-1/public/orders", "mzflow://abc-1/public/orders"),
])
def test_normalizer_accepts_one_or_two_segments(uri: str, normal: str) -> None:
    assert uris.sanitize_uri(urlsplit(uri)).geturl() == normal


@pytest.mark.parametrize("uri", [
    "mzflow:///public/orders", "mzflow://abc", "mzflow://abc/", "mzflow://abc/a/b/c",
    "mzflow://abc//t", "mzflow://abc/public/", "mzflow://abc:5/t", "mzflow://u@abc/t",
    "mzflow://abc/t?x=1", "mzflow://abc/t#f", "spark://abc/t",
])
def test_normalizer_refuses_malformed_uris(uri: str) -> None:
    with pytest.raises(ValueError, match="mzflow"):
        uris.sanitize_uri(urlsplit(uri))


def test_a_quoted_name_with_uri_characters_makes_a_valid_asset(tmp_path: Path) -> None:
    """A quoted identifier may hold / ? # and spaces: graph's URIs encode each name as
    one path segment, so the normalizer accepts them (the DAG file's parse failed)."""
    from mzflow.airflow import graph

    with mzflow.connect(str(tmp_path / "home")) as conn:
        conn.execute('CREATE SCHEMA "s p"')
        conn.execute('CREATE TABLE "s p"."a/b?c#d" (x int)')
        conn.execute('CREATE INDEX "i/x" ON "s p"."a/b?c#d" (x)')
        snap = conn.store.snapshot()
    table = next(i for i in snap.items if i.name == "a/b?c#d")
    index = next(i for i in snap.items if i.name == "i/x")
    for uri, parts in ((graph.table_asset_uri(snap.installation_id, table), 2),
                       (graph.asset_uri(snap.installation_id, index), 1)):
        split = urlsplit(uri)
        assert uris.sanitize_uri(split) == split._replace(netloc=split.netloc.lower())
        assert len(split.path.split("/")) - 1 == parts
    assert uris.openlineage_name(graph.table_asset_uri(snap.installation_id, table))[1] == (
        "s p.a/b?c#d")


def test_factory_and_openlineage_converter_agree() -> None:
    table = uris.create_asset(installation_id="abc", schema="public", name="orders")
    index = uris.create_asset(installation_id="abc", name="materialize.public.v_idx")
    assert (table.uri, index.uri) == ("mzflow://abc/public/orders",
                                      "mzflow://abc/materialize.public.v_idx")
    got = uris.convert_asset_to_openlineage(table, None)
    assert (got.namespace, got.name) == ("mzflow://abc", "public.orders")
    got = uris.convert_asset_to_openlineage(index, None)
    assert (got.namespace, got.name) == ("mzflow://abc", "materialize.public.v_idx")


# -- mzflow airflow init --------------------------------------------------------------------

def test_init_writes_the_loader_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                     ) -> None:
    folder = tmp_path / "dags"
    assert cli.main(["airflow", "init", "--dags-folder", str(folder)]) == 0
    written = folder / "mzflow_catalog.py"
    assert written.read_text() == (REPO / "dags" / "mzflow_catalog.py").read_text()
    assert capsys.readouterr().out.startswith("wrote ")
    assert cli.main(["airflow", "init", "--dags-folder", str(folder)]) == 0
    assert capsys.readouterr().out.startswith("up to date: ")


def test_init_warns_of_a_copied_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "other.py").write_text("x = 1\n")
    monkeypatch.setenv("AIRFLOW__CORE__PLUGINS_FOLDER", str(plugins))
    assert cli.main(["airflow", "init", "--dags-folder", str(tmp_path / "dags")]) == 0
    assert capsys.readouterr().err == ""
    shutil.copy(REPO / "plugins" / "mzflow_plugin.py", plugins)
    assert cli.main(["airflow", "init", "--dags-folder", str(tmp_path / "dags")]) == 0
    assert capsys.readouterr().err.startswith(
        f"WARNING: remove {plugins / 'mzflow_plugin.py'}: the installed package registers")


def test_init_finds_airflows_dags_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                         ) -> None:
    monkeypatch.setenv("AIRFLOW__CORE__DAGS_FOLDER", str(tmp_path / "af"))
    assert install.dags_folder() == tmp_path / "af"
    assert install.dags_folder(str(tmp_path / "flag")) == tmp_path / "flag"


# -- lineage from the catalog ---------------------------------------------------------------

def test_index_lineage_traces_columns_through_views_and_ctes(home: Path) -> None:
    snap = lineage.snapshot(str(home), None)
    ns = f"mzflow://{snap.installation_id}"
    got = lineage.of_index(snap, "big_idx")
    assert got.inputs == [(ns, "public.orders"), (ns, "public.custs")]
    assert got.output == (ns, "materialize.public.big_idx")
    assert got.output_columns == [("area", "text"), ("dbl", "numeric(*,2)")]
    named = {out: [(got.inputs[i][1], c) for i, c in src] for out, src in got.columns.items()}
    assert named == {"area": [("public.custs", "region")],
                     "dbl": [("public.orders", "amount")]}
    totals = lineage.of_index(snap, "totals_primary_idx")
    assert totals.columns["n"] == []  # count(*) reads no column


def test_sink_lineage_ends_at_its_target(home: Path) -> None:
    snap = lineage.snapshot(str(home), None)
    got = lineage.of_sink(snap, "out")
    assert got.output == ("file", str(home.parent / "out"))
    assert [n for _, n in got.inputs] == ["public.orders", "public.custs"]
    assert [c for c, _ in got.output_columns] == ["region", "total", "n"]


def test_operator_lineage_is_openlineage_datasets(home: Path) -> None:
    snap = lineage.snapshot(str(home), None)
    ol = lineage.operator_lineage(lineage.of_index(snap, "big_idx"), 42, 7, 3)
    assert [(d.name, d.facets["version"].datasetVersion) for d in ol.inputs] == [
        ("public.orders", "42"), ("public.custs", "42")]
    (out,) = ol.outputs
    assert out.facets["version"].datasetVersion == "7"
    assert out.outputFacets["outputStatistics"].rowCount == 3
    fields = out.facets["columnLineage"].fields
    assert [(f.name, f.field) for f in fields["dbl"].inputFields] == [
        ("public.orders", "amount")]


def test_operators_report_their_lineage_after_execute(home: Path) -> None:
    from mzflow.airflow.operators import MzflowSinkOperator, MzflowTickOperator

    sink = MzflowSinkOperator(task_id="export", sink="out", home=str(home))
    sink._done = [{"rows": 2}, {"rows": 3}]  # what execute() returned
    ol = sink.get_openlineage_facets_on_complete(None)
    assert [(d.namespace, d.name) for d in ol.outputs] == [("file", str(home.parent / "out"))]
    assert ol.outputs[0].outputFacets["outputStatistics"].rowCount == 5
    assert [d.name for d in ol.inputs] == ["public.orders", "public.custs"]
    tick = MzflowTickOperator(task_id="t", index="big_idx", home=str(home))
    tick._done = {"index": "big_idx", "at": 9, "version_after": 4, "rows_changed": 1}
    ol = tick.get_openlineage_facets_on_complete(None)
    assert ol.outputs[0].name == "materialize.public.big_idx"
    assert {d.facets["version"].datasetVersion for d in ol.inputs} == {"9"}


# -- a real Airflow 3 -----------------------------------------------------------------------

def _python_path(root: Path) -> str:
    """This checkout's packages for Airflow's processes, without the checkout's
    ``mzflow.egg-info`` (``pip install -e`` leaves one there). Airflow 3.3 stops
    registering plugins at the first name it meets twice (``__register_plugins`` in its
    plugins_manager returns instead of continuing), so a second copy of mzflow's entry
    points silently drops every plugin after it: OpenLineage's listener among them, which
    is how CI's dag.test() wrote no task events. The checkout's own entry points (a
    dist-info as pip would write it) are added only when the installed distribution
    does not already declare them."""
    src = root / "src"
    src.mkdir(parents=True)
    for package in ("mzflow", "mzflow_dev"):
        (src / package).symlink_to(REPO / package, target_is_directory=True)
    project = PYPROJECT["project"]
    wanted = {(group, k, v) for group, eps in project["entry-points"].items()
              for k, v in eps.items()}
    site = [p for p in sys.path if Path(p).name == "site-packages"]
    installed = {(ep.group, ep.name, ep.value)
                 for d in importlib.metadata.distributions(name=project["name"], path=site)
                 for ep in d.entry_points}
    if not wanted <= installed:
        d = src / f"{project['name']}-{project['version']}.dist-info"
        d.mkdir()
        (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\n"
                                    f"Version: {project['version']}\n")
        (d / "entry_points.txt").write_text("".join(
            f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items())
            for group, eps in project["entry-points"].items()))
    return str(src)


@pytest.fixture(scope="module")
def af_env(home: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    tmp = tmp_path_factory.mktemp("af")
    af = tmp / "airflow"
    env = airflow_env({**os.environ, "MZFLOW_HOME": str(home),
                       "PYTHONPATH": _python_path(tmp)}, af)
    subprocess.run([AIRFLOW, "db", "migrate"], check=True, capture_output=True, timeout=300,
                   env=env)
    return env


def _airflow(env: dict[str, str], *args: str) -> object:
    out = subprocess.run([AIRFLOW, *args, "-o", "json"], capture_output=True, text=True,
                         env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    # Warnings (graphviz missing…) share stdout: the JSON is the line that opens a list.
    (line,) = [x for x in out.stdout.splitlines() if x.startswith(("[{", "[]"))]
    return json.loads(line)


@pytest.mark.slow
def test_airflow_finds_provider_plugin_and_dags_without_copying_files(
        af_env: dict[str, str]) -> None:
    assert {"Provider": "mzflow", "Version": "0.1.0"} in _airflow(  # type: ignore[operator]
        af_env, "providers", "get", "mzflow")
    hooks = _airflow(af_env, "providers", "hooks")
    assert [h["class"] for h in hooks if h["connection_type"] == "mzflow"] == [  # type: ignore[attr-defined, index]
        "mzflow.airflow.hooks.MzflowHook"]
    plugins = _airflow(af_env, "plugins")
    (ours,) = [p for p in plugins if p["name"] == "mzflow"]  # type: ignore[attr-defined, index]
    assert "group='airflow.plugins'" in ours["source"]
    assert not (Path(af_env["AIRFLOW_HOME"]) / "plugins").exists()
    # Airflow's Asset itself calls the provider's normalizer.
    code = ("from airflow.sdk import Asset\nprint(Asset('mzflow://ABC/public/t').uri)\n"
            "try:\n    Asset('mzflow://abc/a/b/c')\nexcept ValueError as e:\n    print(e)")
    asset = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env=af_env, timeout=120)
    assert asset.stdout.splitlines()[-2:] == [
        "mzflow://abc/public/t", "URI format mzflow:// must be mzflow://<installation>/<name> "
        "or mzflow://<installation>/<schema>/<table>"], asset.stderr[-3000:]
    init = subprocess.run([sys.executable, "-m", "mzflow.cli", "airflow", "init"],
                          capture_output=True, text=True, env=af_env, timeout=120)
    assert init.returncode == 0, init.stderr
    assert init.stdout.strip() == f"wrote {Path(af_env['AIRFLOW__CORE__DAGS_FOLDER'])}" \
                                  f"/mzflow_catalog.py"
    dags = _airflow(af_env, "dags", "list", "--local")
    assert sorted(d["dag_id"] for d in dags) == [  # type: ignore[attr-defined, index]
        "mzflow_compact", "mzflow_etl", "mzflow_sink_out"]


_SCENARIO = """
import json, runpy, sys
from airflow.sdk import DAG

dags = {v.dag_id: v for v in runpy.run_path(sys.argv[1]).values() if isinstance(v, DAG)}
run = dags["mzflow_etl"].test()
RESULT({ti.task_id: str(ti.state).split(".")[-1].lower() for ti in run.get_task_instances()})
"""


@pytest.mark.slow
@pytest.mark.spark
def test_openlineage_events_name_tables_index_and_columns(
        home: Path, af_env: dict[str, str], tmp_path: Path) -> None:
    with mzflow.connect(str(home)) as conn:
        conn.execute("INSERT INTO orders VALUES (1, 'a', 2.50), (2, 'a', 3), (3, 'b', 1);"
                     "INSERT INTO custs VALUES ('a', 'north'), ('b', 'south')")
        ns = f"mzflow://{conn.store.snapshot().installation_id}"
    events = tmp_path / "ol.json"
    loader = install.write_dag_file(tmp_path / "dags")[0]
    # dag.test() syncs its DAG from the DAGs folder (Airflow 3.3) before it runs it.
    env = {**af_env, "AIRFLOW__CORE__DAGS_FOLDER": str(loader.parent),
           "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(
               {"type": "file", "log_file_path": str(events), "append": True})}
    result, log = expect_result(_SCENARIO, str(loader), env=env, timeout=600, cwd=tmp_path)
    assert result == {
        "totals": "success", "big_idx": "success"}, log[-6000:]
    done = {e["job"]["name"]: e for line in events.read_text().splitlines()
            if (e := json.loads(line))["eventType"] == "COMPLETE" and e.get("outputs")}
    assert set(done) == {"mzflow_etl.totals", "mzflow_etl.big_idx"}, (
        events.read_text()[-3000:], log[-6000:])
    for job, index in (("mzflow_etl.totals", "totals_primary_idx"),
                       ("mzflow_etl.big_idx", "big_idx")):
        e = done[job]
        assert [(d["namespace"], d["name"]) for d in e["inputs"]] == [
            (ns, "public.orders"), (ns, "public.custs")]
        (out,) = e["outputs"]
        assert (out["namespace"], out["name"]) == (ns, f"materialize.public.{index}")
        versions = {d["facets"]["version"]["datasetVersion"] for d in e["inputs"]}
        assert len(versions) == 1 and int(versions.pop()) > 0  # one read time for all
    cols = done["mzflow_etl.big_idx"]["outputs"][0]["facets"]["columnLineage"]["fields"]
    assert {k: [(f["name"], f["field"]) for f in v["inputFields"]] for k, v in cols.items()
            } == {"area": [("public.custs", "region")], "dbl": [("public.orders", "amount")]}
    schema = done["mzflow_etl.totals"]["outputs"][0]["facets"]["schema"]["fields"]
    assert [f["name"] for f in schema] == ["region", "total", "n"]
