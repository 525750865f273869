"""Prometheus metrics every service updates, defined once so names and labels never drift.

One registry per process (:data:`REGISTRY`); in the embedded mode all services share it, which
is why series are labelled by what they measure, not by which service object counted them.
Services import the metric they update, e.g. ``metrics.CANDIDATES.labels(status="ok").inc()``,
and ``kforge serve <svc> --metrics-port N`` exposes them with :func:`start_metrics_server`.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

REGISTRY = CollectorRegistry(auto_describe=True)

#: Seconds, from a cached re-check (milliseconds) to a large compile plus benchmark (minutes).
LATENCY_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)

CANDIDATES = Counter(
    "kforge_candidates",
    "Candidate kernels evaluated, by final status (ok, compile_error, wrong_result, timeout, crash, ...).",
    ["status"],
    registry=REGISTRY,
)
QUEUE_LENGTH = Gauge(
    "kforge_queue_length",
    "Work waiting for a worker, by queue (e.g. sandbox evaluations, forge pending candidates).",
    ["queue"],
    registry=REGISTRY,
)
GPU_BUSY_SECONDS = Counter(
    "kforge_gpu_busy_seconds",
    "Seconds a device spent running candidate work (compile excluded), by device index.",
    ["device"],
    registry=REGISTRY,
)
EVALUATION_LATENCY_SECONDS = Histogram(
    "kforge_evaluation_latency_seconds",
    "Wall time of one candidate evaluation, request to result, by backend.",
    ["backend"],
    buckets=LATENCY_BUCKETS_S,
    registry=REGISTRY,
)
LLM_TOKENS = Counter(
    "kforge_llm_tokens",
    "Tokens sent to and received from language models, by model and kind (prompt, completion).",
    ["model", "kind"],
    registry=REGISTRY,
)
LLM_COST_DOLLARS = Counter(
    "kforge_llm_cost_dollars",
    "Dollars spent on language-model calls, by model.",
    ["model"],
    registry=REGISTRY,
)
AUTH_FAILURES = Counter(
    "kforge_auth_failures",
    "RPCs refused for a missing or invalid bearer token, by reason.",
    ["reason"],
    registry=REGISTRY,
)
CLIENT_LIMIT_REJECTIONS = Counter(
    "kforge_client_limit_rejections",
    "Requests refused with RESOURCE_EXHAUSTED because a client was over its limits, by limiter.",
    ["limiter"],
    registry=REGISTRY,
)


@dataclass
class MetricsServer:
    """A running ``/metrics`` HTTP endpoint; ``port`` is the bound port (useful with port 0)."""

    port: int
    address: str
    _server: WSGIServer
    _thread: threading.Thread

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def start_metrics_server(port: int, address: str = "127.0.0.1") -> MetricsServer:
    """Serve :data:`REGISTRY` at ``http://address:port/metrics`` from a daemon thread.

    Loopback by default; a deployment passes ``0.0.0.0`` so the cluster's Prometheus can scrape.
    Metrics carry counts and durations only, never tokens or request contents.
    """
    server, thread = start_http_server(port, addr=address, registry=REGISTRY)
    return MetricsServer(port=server.server_port, address=address, _server=server, _thread=thread)
