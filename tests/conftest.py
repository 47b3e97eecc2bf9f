from collections.abc import Iterator

import pg_server
import pytest


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """SQLAlchemy URL of a database on a throwaway PostgreSQL server (started once)."""
    bindir = pg_server.find_bindir()
    if bindir is None:
        pytest.fail("PostgreSQL server binaries (initdb, pg_ctl) not found under "
                    f"/usr/lib/postgresql/*/bin or on PATH: run {pg_server.ENSURE_SCRIPT} "
                    "(as root) to install them", pytrace=False)
    server = pg_server.PgServer(bindir)
    try:
        server.start()
        yield server.create_database("mzflow_test")
    finally:
        server.stop()
