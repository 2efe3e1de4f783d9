"""Which schemas a tenant may take entity-source tables from: PGBRAID_SOURCE_SCHEMAS,
deny by default.

The login role can read every table of the database (on the embedded server it is
superuser), so a tenant's admin does not choose: the operator maps tenants to schemas,
``tenantA=crm_a,shared;tenantB=crm_b`` (``*`` for every tenant; the older bare form
``app,crm`` is ``*=app,crm``). Two tenants share a schema only when the operator lists
it for both. With nothing set, only tenant ``default`` on the embedded server (a single
local user's database) registers, from any schema not reserved (sources.py).
"""

from __future__ import annotations

from .errors import Forbidden, InvalidRequest
from .models import validate_name

DEFAULT_TENANT = "default"


def schema_map(setting: str) -> dict[str, frozenset[str]]:
    """PGBRAID_SOURCE_SCHEMAS parsed: ``tenant=schema,schema;tenant=...`` (``*``: every
    tenant); a bare ``schema,schema`` (the older form) is ``*=schema,schema``."""
    mapping: dict[str, frozenset[str]] = {}
    for entry in filter(None, (e.strip() for e in setting.split(";"))):
        tenant, _, schemas = entry.rpartition("=") if "=" in entry else ("*", "", entry)
        tenant = tenant.strip()
        if tenant != "*":
            validate_name("tenant", tenant)
        names = frozenset(s.strip() for s in schemas.split(",") if s.strip())
        if not names:
            raise InvalidRequest(f"PGBRAID_SOURCE_SCHEMAS names no schema for tenant {tenant!r}",
                                 setting="PGBRAID_SOURCE_SCHEMAS")
        mapping[tenant] = mapping.get(tenant, frozenset()) | names
    return mapping


def allowed_schemas(setting: str, tenant: str, *, embedded: bool) -> frozenset[str]:
    """The schemas ``tenant`` may register tables from; empty: any schema not reserved,
    only for ``default`` on the embedded server when nothing is set. Forbidden when the
    operator allowed the tenant none (deny by default: the login role reads every table)."""
    mapping = schema_map(setting)
    if not mapping and embedded and tenant == DEFAULT_TENANT:
        return frozenset()
    allowed = mapping.get(tenant, frozenset()) | mapping.get("*", frozenset())
    if not allowed:
        raise Forbidden(f"no schema is open to tenant {tenant!r} for entity sources: the "
                        f"operator allows some with PGBRAID_SOURCE_SCHEMAS={tenant}=schema,...",
                        action="registering an entity source")
    return allowed
