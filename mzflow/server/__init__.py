"""``mzflow serve``: PostgreSQL's wire protocol over one home, so that psql, drivers, BI
tools and dbt connect (issue 35). See README.md for the map; :func:`serve` runs it."""

from __future__ import annotations

import gc
import logging
import signal
import ssl
import threading
from pathlib import Path

from mzflow import config
from mzflow.errors import Error
from mzflow.server.auth import catalog_can_login, catalog_verifiers
from mzflow.server.listen import Server
from mzflow.server.login import Settings

log = logging.getLogger("mzflow.server")


def tls_context(cert: str | Path, key: str | Path) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(str(cert), str(key))
    return context


def make_server(cfg: config.Config, *, host: str = "127.0.0.1", port: int = 6875,
                tls: ssl.SSLContext | None = None, trust: bool = False,
                unix_dir: Path | None = None) -> Server:
    """A server over ``cfg``'s home, not yet listening (``start()``): its roles log in
    with the passwords the catalog keeps verifiers of."""
    from mzflow.catalog.store import Store
    from mzflow.server.statements import open_session

    cfg.home.mkdir(parents=True, exist_ok=True)
    store = Store(cfg.catalog_url)
    settings = Settings(
        open_backend=lambda role, params: open_session(cfg, role, params),
        verifiers=catalog_verifiers(store.snapshot),
        can_login=catalog_can_login(store.snapshot),
        trust=trust)
    return Server(settings, host, port, tls, unix_dir)


def settle(cfg: config.Config) -> None:
    """Before the first client: answer a catalog read once (the binder's and the
    executor's modules load on first use: the first clients waited ~150 ms for them),
    then freeze what the process holds out of the garbage collector's sight. Its full
    collections walked every object the imports made, pyspark's and pandas' included,
    and 50 clients waited up to 70 ms behind each; objects made from now on are
    collected as before."""
    from mzflow.session.connection import Connection

    try:
        with Connection(cfg) as conn:
            conn.execute("SELECT name FROM mz_clusters")
    except Error as e:  # the first client then loads what it needs, as before
        log.info("mzflow serve: warming up failed: %s", e)
    gc.collect()
    gc.freeze()


def serve(cfg: config.Config, *, host: str, port: int, tls: ssl.SSLContext | None,
          trust: bool, unix_dir: Path | None) -> int:
    """Run until SIGTERM or SIGINT; then stop listening, cancel what runs, hang up."""
    server = make_server(cfg, host=host, port=port, tls=tls, trust=trust, unix_dir=unix_dir)
    settle(cfg)
    addresses = server.start()
    login = "trust (--insecure-trust: no password asked)" if trust else "SCRAM-SHA-256"
    log.info("mzflow serve: listening on %s; TLS %s; login %s%s; home %s",
             ", ".join(addresses), "on" if tls else "off", login,
             " (trust on the Unix socket)" if unix_dir else "", cfg.home)
    stopping = threading.Event()

    def stop(signum: int, frame: object) -> None:
        log.info("mzflow serve: %s, stopping", signal.Signals(signum).name)
        stopping.set()

    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        while not stopping.wait(1.0):
            pass
    finally:
        server.stop()
        for s, handler in previous.items():
            signal.signal(s, handler)
    log.info("mzflow serve: stopped")
    return 0
