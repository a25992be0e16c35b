"""The training side of the remote benchmark protocol, in one import:
``RemoteCaseLoader`` (cases), ``RemoteRolloutExecutor`` (rollouts), ``preflight``
(``GET /health``), ``make_client`` (the httpx seam) and ``RemoteServiceError``."""

from __future__ import annotations

from expgit.remote.case_loader import RemoteCaseLoader
from expgit.remote.http import HttpStats, RemoteServiceError, call_json, make_client, preflight
from expgit.remote.rollout_executor import RemoteRolloutExecutor

__all__ = [
    "HttpStats",
    "RemoteCaseLoader",
    "RemoteRolloutExecutor",
    "RemoteServiceError",
    "call_json",
    "make_client",
    "preflight",
]
