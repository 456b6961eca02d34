"""The dashboard shows a Redis pair's provider with its kind, beside PostgreSQL pairs as before."""

from __future__ import annotations

from datetime import UTC, datetime

from meshtui.model import PairStatus, State
from meshtui.tui.pairs import COLUMNS, make_row


def _status(pair: str, provider: str, kind: str) -> PairStatus:
    return PairStatus(
        pair=pair,
        provision=pair.split(":", 1)[0],
        consumer="app1/gitea",
        provider=provider,
        login="gitea_app1_d1fc15",
        generation=1,
        consumer_generation=1,
        provider_generation=1,
        withdrawn=False,
        state=State.WORKING,
        reason="AUTH accepted over TLS (certificate verified) from 10.213.0.3",
        probed_at=None,
        rotated_at=None,
        consumer_file="/srv/app1/gitea/cache.password",
        created_at="2026-11-30T19:00:00+00:00",
        kind=kind,
    )


def test_provider_cell_names_the_kind_of_a_redis() -> None:
    now = datetime.now(UTC)
    at = [c.key for c in COLUMNS].index("provider")
    redis_row = make_row(_status("cache:app1/gitea->db1/redis", "db1/redis", "redis"), now)
    pg_row = make_row(_status("database:app1/gitea->db1/postgres", "db1/postgres", "postgres"), now)
    assert redis_row.cells[at] == "db1/redis (redis)"
    assert pg_row.cells[at] == "db1/postgres"  # PostgreSQL rows read as they always did
    assert _status("c:a/b->c/d", "c/d", "redis").to_json()["kind"] == "redis"
