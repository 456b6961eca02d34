"""``--metrics HOST:PORT``: the watch's view as Prometheus text at ``/metrics``, served with the
official client library from its own registry.

Gauges are set once per cycle from what the cycle saw; counters and the probe histogram grow
as things happen. Every name starts with ``meshtui_``. The listener binds loopback unless the
operator explicitly allows another address: the page names every pair and node.
"""

from __future__ import annotations

import ipaddress
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from meshtui.controller.read.schedule import PairDue
from meshtui.controller.reports import SecretStatus
from meshtui.errors import InputError
from meshtui.model import PairStatus, State


def parse_listen(text: str, *, allow_remote: bool = False) -> tuple[str, int]:
    """``HOST:PORT`` -> (host, port); InputError for a bad value or an unasked-for remote bind."""
    host, sep, port_text = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise InputError(f"--metrics {text!r}: write HOST:PORT, e.g. 127.0.0.1:9713")
    if host == "localhost":
        return "127.0.0.1", int(port_text)
    try:
        address = ipaddress.ip_address(host)
    except ValueError as exc:
        raise InputError(
            f"--metrics {text!r}: {host!r} is not an IP address (give one, e.g. 127.0.0.1)"
        ) from exc
    if not address.is_loopback and not allow_remote:
        raise InputError(
            f"--metrics {text!r}: {host} is not a loopback address; the page names every pair "
            "and node (bind 127.0.0.1, or pass --metrics-allow-remote if you mean it)"
        )
    return str(address), int(port_text)


@dataclass(frozen=True)
class CycleView:
    """What one watch cycle saw, for the gauges."""

    statuses: list[PairStatus]
    schedule: list[PairDue]
    nodes_up: Mapping[str, bool]
    now: float
    ok: bool
    secrets: Sequence[SecretStatus] = ()  # every module's own secret
    secrets_overdue: int = 0  # supplied secrets held past their max_age


class Metrics:
    """The watch's metrics in their own registry, served over HTTP when :meth:`serve` is called."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.pairs = Gauge("meshtui_pairs", "Live pairs by state", ["state"], registry=r)
        self.provider_pairs = Gauge(
            "meshtui_provider_pairs",
            "Live pairs by provider and state",
            ["provider", "state"],
            registry=r,
        )
        self.secrets = Gauge(
            "meshtui_secrets",
            "Modules' own secrets by origin (minted, supplied) and state",
            ["origin", "state"],
            registry=r,
        )
        self.secrets_overdue = Gauge(
            "meshtui_secrets_overdue",
            "Supplied own secrets held longer than their declared max_age",
            registry=r,
        )
        self.overdue = Gauge(
            "meshtui_pairs_overdue", "Live pairs past their rotation policy", registry=r
        )
        self.oldest = Gauge(
            "meshtui_oldest_credential_age_seconds",
            "Age of the oldest live credential",
            registry=r,
        )
        self.next_due = Gauge(
            "meshtui_next_rotation_due_seconds",
            "Seconds until the next rotation a policy asks for (negative: overdue)",
            registry=r,
        )
        self.rotations = Counter(
            "meshtui_rotations", "Pairs rotated by the watch", ["provider"], registry=r
        )
        self.failures = Counter("meshtui_failures", "Failed watch steps", ["step"], registry=r)
        self.probe_latency = Histogram(
            "meshtui_probe_latency_seconds",
            "Login latency of successful probes",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
            registry=r,
        )
        self.last_ok = Gauge(
            "meshtui_last_successful_cycle_timestamp_seconds",
            "When the last watch cycle with no failed step ended",
            registry=r,
        )
        self.node_up = Gauge(
            "meshtui_node_up",
            "Whether the node's agent answered last time it was asked",
            ["node"],
            registry=r,
        )
        self.leader = Gauge(
            "meshtui_watch_leader",
            "1 while this watch leads (it alone acts), 0 while it stands by",
            registry=r,
        )
        self.leader.set(1)  # a watch on SQLite is alone: it leads
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def serve(self, host: str, port: int) -> tuple[str, int]:
        """Start the HTTP listener; returns the address it bound (port 0 picks one)."""
        self._server, self._thread = start_http_server(port, addr=host, registry=self.registry)
        bound = self._server.server_address
        return str(bound[0]), int(bound[1])

    def close(self) -> None:
        """Stop the listener."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def probed(self, latencies_ms: Iterable[float]) -> None:
        """Record the login latency of successful probes."""
        for ms in latencies_ms:
            self.probe_latency.observe(ms / 1000.0)

    def update(self, view: CycleView) -> None:
        """Set every gauge from one cycle's view."""
        live = [s for s in view.statuses if not s.withdrawn]
        by_state = {s: 0 for s in State}
        by_provider: dict[tuple[str, str], int] = {}
        for s in live:
            by_state[s.state] += 1
            key = (s.provider, str(s.state))
            by_provider[key] = by_provider.get(key, 0) + 1
        dues = [d for d in view.schedule if not d.withdrawn]
        with self._lock:
            for state, n in by_state.items():
                self.pairs.labels(state=str(state)).set(n)
            for origin in ("minted", "supplied"):
                for state in State:
                    n = sum(1 for s in view.secrets if s.origin == origin and s.state == state)
                    self.secrets.labels(origin=origin, state=str(state)).set(n)
            self.secrets_overdue.set(view.secrets_overdue)
            self.provider_pairs.clear()
            for (provider, label), n in by_provider.items():
                self.provider_pairs.labels(provider=provider, state=label).set(n)
            self.overdue.set(sum(1 for d in dues if d.is_overdue(view.now)))
            self.oldest.set(max((d.age(view.now) for d in dues), default=0.0))
            due_times = [d.due_at for d in dues if d.due_at is not None]
            if due_times:
                self.next_due.set(min(due_times) - view.now)
            self.node_up.clear()
            for node, up in view.nodes_up.items():
                self.node_up.labels(node=node).set(1 if up else 0)
            if view.ok:
                self.last_ok.set(view.now)
