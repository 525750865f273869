import urllib.request

from servicekit import metrics


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return response.read().decode()


def test_metrics_endpoint_serves_the_shared_registry():
    server = metrics.start_metrics_server(0)
    try:
        metrics.CANDIDATES.labels(status="ok").inc()
        metrics.QUEUE_LENGTH.labels(queue="sandbox_evaluations").set(3)
        metrics.GPU_BUSY_SECONDS.labels(device="0").inc(1.5)
        metrics.EVALUATION_LATENCY_SECONDS.labels(backend="cuda").observe(0.7)
        metrics.LLM_TOKENS.labels(model="m", kind="prompt").inc(120)
        metrics.LLM_COST_DOLLARS.labels(model="m").inc(0.25)
        text = _scrape(server.port)
    finally:
        server.close()
    assert 'kforge_candidates_total{status="ok"}' in text
    assert 'kforge_queue_length{queue="sandbox_evaluations"} 3.0' in text
    assert 'kforge_gpu_busy_seconds_total{device="0"}' in text
    assert 'kforge_evaluation_latency_seconds_bucket{backend="cuda",le="1.0"}' in text
    assert 'kforge_llm_tokens_total{kind="prompt",model="m"}' in text
    assert 'kforge_llm_cost_dollars_total{model="m"}' in text
    assert "kforge_auth_failures_total" in text or "kforge_auth_failures" in text


def test_every_metric_is_registered_once_with_the_kforge_prefix():
    names = [m.name for m in metrics.REGISTRY.collect()]
    assert names and all(n.startswith("kforge_") for n in names)
    assert len(names) == len(set(names))
