"""The tenant's audit log (the tenant's admin key): who did what, newest first; and its
purge (the operator only: ``serve --no-auth``, where a request is the local process)."""

from __future__ import annotations

from typing import Optional

from fastapi import APIRouter, Depends, Query

from ..client import Client
from .auth import caller
from .errors import documented
from .schemas import AuditEvent, AuditPurge, AuditPurged

router = APIRouter(tags=["audit"])


@router.get("/audit", response_model=list[AuditEvent], responses=documented())
def audit_log(since: Optional[str] = Query(None, description=(
                  "ISO-8601 time, or a span back from now: 30s, 15m, 2h, 7d.")),
              action: Optional[str] = Query(None, description="One action, e.g. key.refused."),
              limit: int = Query(100, description="Events, 1 to 10000."),
              client: Client = Depends(caller)) -> list:
    """Key creation, revocation and use (counted per minute), refusals (401, 403), writes."""
    return client.audit(since=since, action=action, limit=limit)


@router.post("/audit/purge", response_model=AuditPurged, responses=documented())
def purge_audit(body: AuditPurge, client: Client = Depends(caller)) -> dict:
    """Remove the tenant's audit rows older than ``before`` (default: the retention policy,
    PGBRAID_AUDIT_RETENTION_DAYS), recorded as ``audit.purged``. The operator's only:
    every API key is refused (403), the unrestricted admin's too."""
    return client.purge_audit(before=body.before)
