"""Landing folders in S3-compatible object storage (issue 37, item 5), against a real S3
server on the loopback address (moto's server mode): each object loads once, a changed
object is a new file, PATTERN and globs pick keys, a bad object fails alone and is
recorded with its URL, and errors name what is wrong. Rows are compared with DuckDB
reading the same files from local disk."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import mzflow
from mzflow import config
from mzflow.errors import Error
from tests.test_copy_folder import history, oracle, table_rows, write

pytestmark = pytest.mark.slow  # starts a server process


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1",
                             "-p", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "moto's S3 server did not start in 60 s"
            time.sleep(0.2)
    yield f"http://127.0.0.1:{port}"
    proc.terminate()
    proc.wait(timeout=30)


@pytest.fixture
def s3(endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A boto3 client of the server, with a fresh bucket ``land``; the same AWS_*
    variables any AWS client reads are what mzflow reads."""
    import boto3

    for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                 "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": endpoint}.items():
        monkeypatch.setenv(k, v)
    client = boto3.client("s3")
    for b in client.list_buckets().get("Buckets", []):  # a clean server per test
        for o in client.list_objects_v2(Bucket=b["Name"]).get("Contents", []):
            client.delete_object(Bucket=b["Name"], Key=o["Key"])
        client.delete_bucket(Bucket=b["Name"])
    client.create_bucket(Bucket="land")
    return client


@pytest.fixture
def conn(tmp_path: Path) -> Iterator[mzflow.Connection]:
    with mzflow.connect(str(tmp_path / "home")) as c:
        c.execute("CREATE TABLE t (a int, b text)")
        yield c


def upload(s3: Any, local: Path, key: str) -> None:
    s3.put_object(Bucket="land", Key=key, Body=local.read_bytes())


@pytest.mark.parametrize("fmt", ["parquet", "csv", "json"])
def test_a_bucket_prefix_loads_each_object_once(conn: mzflow.Connection, s3: Any,
                                                tmp_path: Path, fmt: str) -> None:
    files = [write(tmp_path / f"p{i}.{fmt}", fmt, [(i * 10 + j, f"r{i}{j}") for j in range(i + 1)])
             for i in range(3)]
    for i, f in enumerate(files):
        upload(s3, f, f"in/day={i}/{f.name}")
    upload(s3, files[0], f"in/.hidden/{files[0].name}")
    s3.put_object(Bucket="land", Key="in/readme.txt", Body=b"not data")
    s3.put_object(Bucket="land", Key="elsewhere/x.csv", Body=b"9,no\n")
    copy = f"COPY t FROM 's3://land/in' WITH (FORMAT {fmt}, PATTERN '*.{fmt}')"
    want = oracle(files, fmt)
    assert conn.execute(copy).status == f"COPY {len(want)}"
    assert table_rows(conn) == want
    assert conn.execute(copy).status == "COPY 0"  # nothing new
    assert [(p, s) for p, _, _, s, _, _ in history(conn)] == [
        (f"s3://land/in/day={i}/{f.name}", "loaded") for i, f in enumerate(files)]


def test_a_changed_object_loads_again_and_globs_pick_keys(conn: mzflow.Connection, s3: Any,
                                                          tmp_path: Path) -> None:
    a = write(tmp_path / "a.csv", "csv", [(1, "x")])
    b = write(tmp_path / "b.csv", "csv", [(2, "y")])
    upload(s3, a, "in/a.csv")
    upload(s3, b, "in/sub/b.csv")
    s3.put_object(Bucket="land", Key="in/c.json", Body=b'{"a": 3, "b": "z"}\n')
    assert conn.execute("COPY t FROM 's3://land/in/*.csv'").status == "COPY 2"  # * crosses /
    assert table_rows(conn) == oracle([a, b], "csv")
    a2 = write(tmp_path / "a2.csv", "csv", [(1, "x"), (4, "w")])  # another size
    upload(s3, a2, "in/a.csv")
    assert conn.execute("COPY t FROM 's3://land/in/*.csv'").status == "COPY 2"
    assert table_rows(conn) == oracle([a, b, a2], "csv")
    # One object named exactly is the one-file COPY, as for a local file.
    assert conn.execute("COPY t FROM 's3://land/in/c.json' WITH (FORMAT json)"
                        ).status == "COPY 1"


def test_a_bad_object_fails_alone(conn: mzflow.Connection, s3: Any, tmp_path: Path) -> None:
    good = write(tmp_path / "good.parquet", "parquet", [(1, "x"), (2, "y")])
    upload(s3, good, "in/1-good.parquet")
    s3.put_object(Bucket="land", Key="in/2-bad.parquet", Body=b"PAR1 not really parquet")
    r = conn.execute("COPY t FROM 's3://land/in' WITH (FORMAT parquet)")
    assert r.status == "COPY 2" and table_rows(conn) == oracle([good], "parquet")
    assert any(n.startswith('could not read PARQUET file "s3://land/in/2-bad.parquet"')
               for n in r.notices), r.notices
    rows = history(conn)
    assert sorted((p, s) for p, _, _, s, _, _ in rows) == [
        ("s3://land/in/1-good.parquet", "loaded"), ("s3://land/in/2-bad.parquet", "failed")]


def test_errors_name_what_is_wrong(conn: mzflow.Connection, s3: Any) -> None:
    with pytest.raises(Error) as e:
        conn.execute("COPY t FROM 's3://land/none'")
    assert e.value.message == 'could not open file "s3://land/none" for reading: no such file'
    with pytest.raises(Error) as e:
        conn.execute("COPY t FROM 's3://land/none' WITH (PATTERN '*.csv')")
    assert e.value.message == 'COPY FROM "s3://land/none": no such folder'
    with pytest.raises(Error) as e:
        conn.execute("COPY t FROM 's3://no-such-bucket/in'")
    assert e.value.message.startswith('COPY FROM "s3://no-such-bucket/in": ')
    assert "AWS_" in (e.value.hint or "")
    with pytest.raises(Error) as e:
        conn.execute("COPY t FROM 'gs://land/in'")
    assert e.value.message == 'COPY FROM "gs://land/in": unsupported URL scheme "gs"'
    assert table_rows(conn) == []


def test_an_unreachable_endpoint_fails_in_seconds(conn: mzflow.Connection, s3: Any,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{_free_port()}")
    with pytest.raises(Error) as e:
        conn.execute("COPY t FROM 's3://land/in'")
    assert e.value.message.startswith('COPY FROM "s3://land/in": ')


def test_only_a_superuser_reads_objects(tmp_path: Path, s3: Any) -> None:
    with mzflow.connect(str(tmp_path / "home")) as admin:
        admin.execute("CREATE TABLE t (a int, b text); CREATE ROLE joe LOGIN; "
                      "GRANT INSERT, SELECT ON t TO joe")
        with mzflow.connect(str(tmp_path / "home"), role="joe") as joe:
            with pytest.raises(mzflow.InsufficientPrivilege) as e:
                joe.execute("COPY t FROM 's3://land/in'")
    assert e.value.message == "permission denied to COPY from a file"


def test_a_warehouse_in_object_storage_is_refused_clearly(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MZFLOW_HOME", raising=False)
    with pytest.raises(Error) as e:
        config.load("s3://bucket/home")
    assert e.value.message == ('mzflow\'s home must be a local or shared-disk path, not '
                               '"s3://bucket/home"')
    assert "docs/object-storage.md" in (e.value.hint or "")
    assert os.environ.get("MZFLOW_HOME") is None
