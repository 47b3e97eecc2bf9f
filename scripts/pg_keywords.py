"""Write mzflow/catalog/pg_keywords.txt from a throwaway PostgreSQL's pg_get_keywords().

mzflow answers ``pg_get_keywords()`` (JDBC's getSQLKeywords, DBeaver, pgloader ask it)
from that file: PostgreSQL's own list, which clients use to decide what to quote. Run
this when the PostgreSQL the tests compare against changes version; the test in
tests/test_pg_catalog.py fails until then.

    .venv/bin/python scripts/pg_keywords.py
"""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa

from mzflow_dev import pg_server

OUT = Path(__file__).resolve().parents[1] / "mzflow" / "catalog" / "pg_keywords.txt"


def main() -> None:
    bindir = pg_server.find_bindir()
    if bindir is None:
        raise SystemExit(f"no PostgreSQL server binaries: run {pg_server.ENSURE_SCRIPT}")
    server = pg_server.PgServer(bindir)
    server.start()
    try:
        with sa.create_engine(server.create_database("keywords")).connect() as c:
            version = c.execute(sa.text("SHOW server_version")).scalar()
            rows = c.execute(sa.text("SELECT word, catcode, barelabel FROM pg_get_keywords() "
                                     "ORDER BY word")).fetchall()
    finally:
        server.stop()
    lines = [f"# pg_get_keywords() of PostgreSQL {version}: word, catcode, and '-' where the "
             "word requires AS (barelabel false). Written by scripts/pg_keywords.py."]
    lines += [f"{w} {code}{'' if bare else ' -'}" for w, code, bare in rows]
    OUT.write_text("\n".join(lines) + "\n")
    print(f"{OUT}: {len(rows)} keywords of PostgreSQL {version}")


if __name__ == "__main__":
    main()
