"""The kernel cache: a complete search ends only the same proposer's next search; old caches keep working."""

import sqlite3
from pathlib import Path

from forge_service.kernel_cache import (
    CACHE_FILE,
    CachedKernel,
    KernelCache,
    offline_templates_fingerprint,
    searcher_of,
    sources_fingerprint,
)


def _kernel(latency_us: float, proposer: str, complete: bool = True, source: str = "k") -> CachedKernel:
    return CachedKernel("card", "sm_90", "nvcc 12", source, "d", {"family": "x"}, latency_us, 2.0, complete, "run",
                        proposer)


def test_a_complete_search_ends_the_same_proposers_search_and_no_other(tmp_path: Path) -> None:
    cache = KernelCache(tmp_path)
    assert cache.offer(_kernel(10.0, "offline"))
    hit = cache.lookup("card", "sm_90", "nvcc 12")
    assert hit is not None and hit.proposer == "offline"
    assert hit.completes_search_for("offline") and not hit.completes_search_for("openai/gpt-5")
    # The LLM searched to the end without beating it: the kernel stays, now complete for the LLM.
    assert not cache.offer(_kernel(12.0, "openai/gpt-5", source="slower"))
    hit = cache.lookup("card", "sm_90", "nvcc 12")
    assert hit is not None and hit.source == "k" and hit.completes_search_for("openai/gpt-5")
    # A faster kernel replaces it, whoever found it.
    assert cache.offer(_kernel(8.0, "offline", source="faster"))
    hit = cache.lookup("card", "sm_90", "nvcc 12")
    assert hit is not None and hit.source == "faster" and hit.completes_search_for("offline")
    cache.close()


def test_a_cache_written_before_proposers_were_recorded_seeds_searches_without_ending_them(tmp_path: Path) -> None:
    old = sqlite3.connect(tmp_path / CACHE_FILE)
    old.executescript("""
        CREATE TABLE kernels (
          card_id TEXT NOT NULL, arch TEXT NOT NULL, toolchain TEXT NOT NULL,
          source TEXT NOT NULL, description TEXT NOT NULL, knobs_json TEXT NOT NULL,
          latency_us REAL NOT NULL, speedup REAL NOT NULL, search_complete INTEGER NOT NULL,
          run_id TEXT NOT NULL, updated_at REAL NOT NULL,
          PRIMARY KEY (card_id, arch, toolchain));
        INSERT INTO kernels VALUES ('card', 'sm_90', 'nvcc 12', 'old', 'd', '{}', 5.0, 3.0, 1, 'r0', 0.0);
    """)
    old.close()
    cache = KernelCache(tmp_path)
    hit = cache.lookup("card", "sm_90", "nvcc 12")
    assert hit is not None and hit.source == "old" and hit.proposer == ""
    assert not hit.completes_search_for("offline")
    assert not cache.offer(_kernel(6.0, "offline"))  # slower: the old kernel stays, complete for this proposer now
    hit = cache.lookup("card", "sm_90", "nvcc 12")
    assert hit is not None and hit.source == "old" and hit.completes_search_for("offline")
    cache.close()


def test_the_offline_searcher_is_named_by_its_templates_and_an_llm_by_its_model(tmp_path: Path) -> None:
    assert searcher_of("openai/gpt-5") == "openai/gpt-5"
    assert searcher_of("offline") == f"offline@{offline_templates_fingerprint()}"
    assert len(offline_templates_fingerprint()) == 16 and offline_templates_fingerprint() != sources_fingerprint([])
    (tmp_path / "family").mkdir()
    (tmp_path / "family" / "render.py").write_text("EXPR = 'log1pf(x)'\n")
    before = sources_fingerprint([tmp_path])
    assert sources_fingerprint([tmp_path]) == before
    (tmp_path / "family" / "render.py").write_text("EXPR = 'kf_log1pf(x)'\n")  # a mended template
    assert sources_fingerprint([tmp_path]) != before
    (tmp_path / "family" / "render.py").rename(tmp_path / "family" / "other.py")  # same text, another module
    renamed = sources_fingerprint([tmp_path])
    assert renamed not in (before, sources_fingerprint([]))
    (tmp_path / "family" / "helpers.cuh").write_text("__device__ float kf_twice(float v) { return 2 * v; }\n")
    assert sources_fingerprint([tmp_path]) != renamed  # the CUDA helpers a template pastes in count too
    (tmp_path / "family" / "notes.txt").write_text("not a template\n")
    with_helpers = sources_fingerprint([tmp_path])
    (tmp_path / "family" / "notes.txt").write_text("still not a template\n")
    assert sources_fingerprint([tmp_path]) == with_helpers
