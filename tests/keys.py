"""Keys for tests: an expired key, made the only honest way there is (keys cannot be
created expired): created with a future expiry, then backdated in SQL as the test's
own setup, through the tenant's raw session."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone


def expired_key(client, *, expired_at: datetime | str | None = None, **grants) -> dict[str, str]:
    """A key of ``client``'s tenant (``grants`` as for ``create_key``) whose expiry is
    ``expired_at`` (default a minute ago)."""
    key = client.create_key(expires=datetime.now(timezone.utc) + timedelta(hours=1), **grants)
    when = expired_at or datetime.now(timezone.utc) - timedelta(minutes=1)
    with client.session() as conn:
        assert conn.execute("UPDATE pgbraid.api_keys SET expires_at = %s WHERE id = %s",
                            (when, key["id"])).rowcount == 1
    return key
