"""Airflow's authentication and authorization for the plugin's endpoints.

The api-server mounts a plugin's FastAPI app without any authentication of its own, so
each route asks for it: the user comes from Airflow's own ``get_user`` (a bearer JWT, or
the UI's ``_token`` cookie that the page inside Airflow's iframe carries), and Airflow's
auth manager decides what that user may see: the plugin's pages need the PLUGINS view,
a cluster's page also read access to its DAG. No credential: 401; a bad token or no
permission: 403 (Airflow's own answers).

Airflow is imported inside the dependency so that importing the plugin (every Airflow
component loads plugins) does not import the api-server's security module.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

_bearer = HTTPBearer(auto_error=False)


class Access:
    """What the request's user may read, asked of Airflow's auth manager."""

    def __init__(self, user: Any):
        self.user = user

    def plugin(self) -> None:
        from airflow.api_fastapi.app import get_auth_manager
        from airflow.api_fastapi.auth.managers.models.resource_details import AccessView

        self._require(get_auth_manager().is_authorized_view(access_view=AccessView.PLUGINS,
                                                            user=self.user))

    def dag(self, dag_id: str) -> None:
        from airflow.api_fastapi.app import get_auth_manager
        from airflow.api_fastapi.auth.managers.models.resource_details import DagDetails

        self.plugin()
        self._require(get_auth_manager().is_authorized_dag(
            method="GET", details=DagDetails(id=dag_id), user=self.user))

    @staticmethod
    def _require(allowed: bool) -> None:
        if not allowed:
            raise HTTPException(status.HTTP_403_FORBIDDEN, "Forbidden")


async def access(request: Request,
                 bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
                 ) -> Access:
    """The request's user, as Airflow's own routes authenticate it."""
    from airflow.api_fastapi.core_api.security import get_user

    return Access(await get_user(request, None, bearer))


AccessDep = Annotated[Access, Depends(access)]
