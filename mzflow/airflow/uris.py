"""The ``mzflow`` asset URI scheme, registered by the provider (``provider.py``).

``mzflow://<installation_id>/<name>`` names an index (graph.asset_uri) and
``mzflow://<installation_id>/<schema>/<table>`` a table: one or two path segments
after the catalog's installation id, which keeps two catalogs sharing one Airflow
apart. Airflow calls :func:`sanitize_uri` on every Asset it is given with this scheme,
so a malformed one is refused when the DAG is parsed, not when an event misses it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import SplitResult, unquote, urlsplit

if TYPE_CHECKING:
    from airflow.sdk import Asset

SCHEME = "mzflow"


def _segments(uri: SplitResult) -> list[str]:
    if uri.scheme != SCHEME:
        raise ValueError(f"not an mzflow URI: scheme {uri.scheme!r}")
    if not uri.netloc or uri.port is not None or "@" in uri.netloc:
        raise ValueError("URI format mzflow:// must name the catalog's installation id "
                         "as its host: mzflow://<installation>/<name>")
    if uri.query or uri.fragment:
        raise ValueError("URI format mzflow:// takes no query or fragment")
    parts = uri.path.split("/")[1:]  # the path starts with "/"
    if not 1 <= len(parts) <= 2 or not all(parts):
        raise ValueError("URI format mzflow:// must be mzflow://<installation>/<name> or "
                         "mzflow://<installation>/<schema>/<table>")
    return parts


def sanitize_uri(uri: SplitResult) -> SplitResult:
    """Airflow's normalizer: checks the shape; the installation id is lower-cased, as
    a UUID's text is, so the two spellings are one asset."""
    _segments(uri)
    return uri._replace(netloc=uri.netloc.lower())


def create_asset(*, installation_id: str, name: str, schema: str | None = None,
                 extra: dict[str, Any] | None = None) -> Asset:
    """``Asset.from``-style factory: ``schema`` given names a table, else an index."""
    from airflow.sdk import Asset

    path = f"{schema}/{name}" if schema else name
    return Asset(uri=f"{SCHEME}://{installation_id}/{path}", extra=extra or {})


def openlineage_name(uri: str) -> tuple[str, str]:
    """``(namespace, name)`` of an mzflow URI as OpenLineage datasets name it: the
    namespace is the catalog, the name its dotted path (``schema.table`` or the index's
    qualified name)."""
    parsed = urlsplit(uri)
    parts = _segments(parsed)
    return f"{SCHEME}://{parsed.netloc.lower()}", ".".join(unquote(p) for p in parts)


def convert_asset_to_openlineage(asset: Asset, lineage_context: Any) -> Any:
    """The provider's ``to_openlineage_converter``: an mzflow Asset → an OpenLineage
    Dataset, named as ``lineage.py`` names the datasets a tick reads and writes."""
    from airflow.providers.common.compat.openlineage.facet import Dataset

    namespace, name = openlineage_name(asset.uri)
    return Dataset(namespace=namespace, name=name)
