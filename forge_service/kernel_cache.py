"""Kernels remembered across runs, keyed by card variant, device architecture and toolchain.

A card seen before starts from its best known kernel (re-verified like any candidate); when the
earlier search of that card was complete and made by the same proposer, the card needs no further
proposals at all. Another proposer (an LLM after the offline templates, or another model) searches
on from the cached kernel: what one proposer exhausted says nothing of what another would find.
The offline proposer is told apart by its templates' fingerprint, so templates mended or added
since a card was searched search it again, from the cached kernel.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import sqlite3
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

CACHE_FILE = "kernel_cache.sqlite"

SCHEMA = """
CREATE TABLE IF NOT EXISTS kernels (
  card_id TEXT NOT NULL, arch TEXT NOT NULL, toolchain TEXT NOT NULL,
  source TEXT NOT NULL, description TEXT NOT NULL, knobs_json TEXT NOT NULL,
  latency_us REAL NOT NULL, speedup REAL NOT NULL, search_complete INTEGER NOT NULL,
  run_id TEXT NOT NULL, updated_at REAL NOT NULL, proposer TEXT NOT NULL DEFAULT '',
  PRIMARY KEY (card_id, arch, toolchain)
);
"""
COLUMNS = ("card_id, arch, toolchain, source, description, knobs_json, latency_us, speedup, search_complete, run_id, "
           "updated_at, proposer")


OFFLINE = "offline"
OFFLINE_TEMPLATES = "agent_service.offline"
#: The files a template is made of: its Python and the CUDA helpers it pastes in.
TEMPLATE_SUFFIXES = (".py", ".cuh", ".h")


def sources_fingerprint(folders: Sequence[str | Path]) -> str:
    """A short digest of the template sources under ``folders``: names and contents."""
    digest = hashlib.sha256()
    for folder in folders:
        for path in sorted(p for p in Path(folder).rglob("*") if p.suffix in TEMPLATE_SUFFIXES and p.is_file()):
            digest.update(path.relative_to(folder).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


@functools.cache
def offline_templates_fingerprint() -> str:
    """The offline proposer's templates' fingerprint (its package found without importing it)."""
    spec = importlib.util.find_spec(OFFLINE_TEMPLATES)
    return sources_fingerprint(list(spec.submodule_search_locations or []) if spec else [])


def searcher_of(proposer: str) -> str:
    """Who searched a card, as the cache records it: an LLM by its model name; the offline
    proposer with its templates' fingerprint (the same knob set renders other code after a change)."""
    return f"{OFFLINE}@{offline_templates_fingerprint()}" if proposer == OFFLINE else proposer


@dataclass(frozen=True)
class CachedKernel:
    card_id: str
    arch: str
    toolchain: str
    source: str
    description: str
    knobs: dict[str, object]
    latency_us: float
    speedup: float
    search_complete: bool
    run_id: str
    proposer: str = ""  # who searched (searcher_of): "offline@<fingerprint>" or the LLM's model name; "" in old caches

    def completes_search_for(self, proposer: str) -> bool:
        """Whether this kernel ends a search by ``proposer``: that proposer already searched the card to the end."""
        return self.search_complete and self.proposer == proposer


class KernelCache:
    """A small SQLite table beside the run directories; shared by concurrent runs."""

    def __init__(self, runs_dir: Path) -> None:
        self.path = Path(runs_dir) / CACHE_FILE
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=10.0)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(SCHEMA)
        if "proposer" not in {row[1] for row in self._db.execute("PRAGMA table_info(kernels)")}:
            self._db.execute("ALTER TABLE kernels ADD COLUMN proposer TEXT NOT NULL DEFAULT ''")

    def lookup(self, card_id: str, arch: str, toolchain: str) -> CachedKernel | None:
        with self._lock:
            row = self._db.execute(
                "SELECT source, description, knobs_json, latency_us, speedup, search_complete, run_id, proposer"
                " FROM kernels WHERE card_id = ? AND arch = ? AND toolchain = ?",
                (card_id, arch, toolchain),
            ).fetchone()
        if row is None:
            return None
        return CachedKernel(card_id, arch, toolchain, row[0], row[1], json.loads(row[2]), row[3], row[4],
                            bool(row[5]), row[6], row[7])

    def offer(self, kernel: CachedKernel) -> bool:
        """Keep ``kernel`` if it beats what is cached for its key; returns whether it was kept.

        A complete search that did not beat the cached kernel still marks it complete for its
        proposer: the next run of that proposer need not search the card again."""
        key = (kernel.card_id, kernel.arch, kernel.toolchain)
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                row = self._db.execute(
                    "SELECT latency_us, search_complete, proposer FROM kernels"
                    " WHERE card_id = ? AND arch = ? AND toolchain = ?", key).fetchone()
                better = row is None or kernel.latency_us < row[0] or (
                    kernel.latency_us == row[0] and kernel.search_complete and not row[1])
                if better:
                    self._db.execute(
                        f"INSERT OR REPLACE INTO kernels ({COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                        (*key, kernel.source, kernel.description, json.dumps(kernel.knobs, sort_keys=True),
                         kernel.latency_us, kernel.speedup, int(kernel.search_complete), kernel.run_id, time.time(),
                         kernel.proposer),
                    )
                elif kernel.search_complete and (not row[1] or row[2] != kernel.proposer):
                    self._db.execute("UPDATE kernels SET search_complete = 1, proposer = ?, updated_at = ?"
                                     " WHERE card_id = ? AND arch = ? AND toolchain = ?",
                                     (kernel.proposer, time.time(), *key))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return better

    def close(self) -> None:
        with self._lock:
            self._db.close()
