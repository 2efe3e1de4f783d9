"""API keys of the key's tenant: create, list, revoke (the tenant's admin)."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from ..client import Client
from .auth import caller
from .errors import documented
from .schemas import KeyCreate, KeyCreated, KeyInfo, KeyRevoked

router = APIRouter(tags=["keys"])


@router.post("/keys", status_code=201, response_model=KeyCreated, responses=documented(413))
def create_key(body: KeyCreate, client: Client = Depends(caller)) -> dict:
    """A new key: the answer is the only time the key itself is shown."""
    return client.create_key(pipeline=body.pipeline, permissions=body.permissions,
                             classification=body.classification, expires=body.expires,
                             admin=body.admin)


@router.get("/keys", response_model=list[KeyInfo], responses=documented())
def list_keys(client: Client = Depends(caller)) -> list:
    """The tenant's keys by their prefix (never a key or its digest)."""
    return client.keys()


@router.delete("/keys/{key_id}", response_model=KeyRevoked, responses=documented())
def revoke_key(key_id: str, client: Client = Depends(caller)) -> dict:
    """Revoke a key: the next request that presents it is refused (401)."""
    return client.revoke_key(key_id)
