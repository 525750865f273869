"""The run store: one SQLite database and a blob folder per run directory.

Every fact about a run lives here: its configuration and status, its cards, every candidate
(source, proposer, cost), every evaluation result, the events, the LLM exchanges, and the log
of search-tree operations from which a resumed run rebuilds each card's tree exactly. Each
write is one transaction (WAL mode), so a process killed at any point leaves a consistent store.
It takes and gives domain types (:mod:`kforge_domain`) and imports no generated proto code; a
result is stored as its wire message's JSON (:mod:`forge_service.stored_result`), as before.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forge_service.stored_result import result_from_json, result_to_json
from kforge_domain.blobs import BLOBS_DIR, blob_digest, blob_file_name
from kforge_domain.cost import Cost, LlmExchange
from kforge_domain.result import CandidateResult

if TYPE_CHECKING:
    from packager.format import FallbackEntry, KernelEntry, ModelIdentity

#: Every run event is also logged here, so ``kforge -v`` shows a run's progress as it happens.
event_log = logging.getLogger("forge_service.events")

DB_FILE = "run.sqlite"
CAPTURE_DIR = "capture"

SCHEMA = """
CREATE TABLE IF NOT EXISTS run (
  id TEXT PRIMARY KEY, config_json TEXT NOT NULL, status TEXT NOT NULL, error TEXT NOT NULL DEFAULT '',
  created_at REAL NOT NULL, updated_at REAL NOT NULL, model_name TEXT NOT NULL DEFAULT '',
  device_json TEXT NOT NULL DEFAULT '', total_eager_us REAL, report_json TEXT
);
CREATE TABLE IF NOT EXISTS cards (
  id TEXT PRIMARY KEY, card_json TEXT NOT NULL, rank INTEGER NOT NULL, selected INTEGER NOT NULL,
  status TEXT NOT NULL, reason TEXT NOT NULL DEFAULT '', budget INTEGER NOT NULL DEFAULT 0,
  floor_us REAL
);
CREATE TABLE IF NOT EXISTS candidates (
  id TEXT PRIMARY KEY, card_id TEXT NOT NULL, parent_id TEXT NOT NULL, node_id INTEGER NOT NULL,
  seq INTEGER NOT NULL, source TEXT, description TEXT NOT NULL DEFAULT '', knobs_json TEXT NOT NULL DEFAULT '{}',
  proposer TEXT NOT NULL DEFAULT '', state TEXT NOT NULL, cost_json TEXT NOT NULL DEFAULT '{}',
  created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS candidates_card ON candidates (card_id, seq);
CREATE TABLE IF NOT EXISTS results (
  candidate_id TEXT PRIMARY KEY, status TEXT NOT NULL, result_json TEXT NOT NULL,
  latency_us REAL, eager_latency_us REAL, speedup REAL, artifact_sha256 TEXT, created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS events (
  seq INTEGER PRIMARY KEY AUTOINCREMENT, ts REAL NOT NULL, kind TEXT NOT NULL, message TEXT NOT NULL,
  card_id TEXT NOT NULL DEFAULT '', candidate_id TEXT NOT NULL DEFAULT '', status TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS llm_calls (
  id INTEGER PRIMARY KEY AUTOINCREMENT, candidate_id TEXT NOT NULL, card_id TEXT NOT NULL, model TEXT NOT NULL,
  prompt TEXT NOT NULL, response TEXT NOT NULL, prompt_tokens INTEGER NOT NULL, completion_tokens INTEGER NOT NULL,
  usd REAL NOT NULL, latency_s REAL NOT NULL, error TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS tree_ops (
  seq INTEGER PRIMARY KEY AUTOINCREMENT, card_id TEXT NOT NULL, op TEXT NOT NULL, args_json TEXT NOT NULL
);
"""


@dataclass(frozen=True)
class CandidateRow:
    id: str
    card_id: str
    parent_id: str
    node_id: int
    seq: int
    source: str | None
    description: str
    knobs: dict[str, Any]
    proposer: str
    state: str  # "proposing" | "proposed" | "evaluated" | "no_proposal"
    cost: Cost


@dataclass(frozen=True)
class CardRow:
    id: str
    card_json: str
    rank: int
    selected: bool
    status: str
    reason: str
    budget: int
    floor_us: float | None


class RunStore:
    """Read and write one run directory. Safe to share between threads of one process."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / BLOBS_DIR).mkdir(exist_ok=True)
        self._lock = threading.RLock()
        self._db = sqlite3.connect(self.run_dir / DB_FILE, check_same_thread=False, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute("PRAGMA busy_timeout=10000")
        self._db.executescript(SCHEMA)

    @property
    def capture_dir(self) -> Path:
        return self.run_dir / CAPTURE_DIR

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One atomic write: everything inside lands together or not at all."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _query(self, sql: str, args: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        with self._lock:
            return list(self._db.execute(sql, args))

    # -- run ---------------------------------------------------------------------------------
    def create_run(self, run_id: str, config_json: str, model_name: str) -> None:
        now = time.time()
        with self.transaction() as db:
            db.execute(
                "INSERT INTO run (id, config_json, status, created_at, updated_at, model_name) VALUES (?,?,?,?,?,?)",
                (run_id, config_json, "pending", now, now, model_name),
            )

    def run_row(self) -> sqlite3.Row:
        rows = self._query("SELECT * FROM run")
        if not rows:
            raise LookupError(f"{self.run_dir} holds no run")
        return rows[0]

    def update_run(self, **fields: Any) -> None:
        if not fields:
            return
        cols = ", ".join(f"{k} = ?" for k in fields)
        with self.transaction() as db:
            db.execute(f"UPDATE run SET {cols}, updated_at = ?", (*fields.values(), time.time()))

    # -- cards -------------------------------------------------------------------------------
    def put_cards(self, rows: list[CardRow]) -> None:
        with self.transaction() as db:
            db.executemany(
                "INSERT OR REPLACE INTO cards (id, card_json, rank, selected, status, reason, budget, floor_us)"
                " VALUES (?,?,?,?,?,?,?,?)",
                [(r.id, r.card_json, r.rank, int(r.selected), r.status, r.reason, r.budget, r.floor_us) for r in rows],
            )

    def cards(self) -> list[CardRow]:
        return [
            CardRow(r["id"], r["card_json"], r["rank"], bool(r["selected"]), r["status"], r["reason"],
                    r["budget"], r["floor_us"])
            for r in self._query("SELECT * FROM cards ORDER BY rank")
        ]

    def card(self, card_id: str) -> CardRow:
        for row in self.cards():
            if row.id == card_id:
                return row
        raise LookupError(f"no card {card_id!r}")

    def set_card_status(self, card_id: str, status: str, reason: str = "") -> None:
        with self.transaction() as db:
            db.execute("UPDATE cards SET status = ?, reason = ? WHERE id = ?", (status, reason, card_id))

    # -- candidates and results --------------------------------------------------------------
    def add_candidate(self, candidate_id: str, card_id: str, parent_id: str, node_id: int, proposer: str,
                      tree_op: tuple[str, dict[str, Any]]) -> None:
        """A new pending candidate, together with the tree operation that created its node."""
        with self.transaction() as db:
            seq = db.execute("SELECT COUNT(*) FROM candidates WHERE card_id = ?", (card_id,)).fetchone()[0]
            db.execute(
                "INSERT INTO candidates (id, card_id, parent_id, node_id, seq, proposer, state, created_at)"
                " VALUES (?,?,?,?,?,?,?,?)",
                (candidate_id, card_id, parent_id, node_id, seq, proposer, "proposing", time.time()),
            )
            _log_op(db, card_id, *tree_op)

    def set_proposal(self, candidate_id: str, source: str | None, description: str, knobs: dict[str, Any],
                     cost: Cost, exchanges: Sequence[LlmExchange], card_id: str,
                     tree_op: tuple[str, dict[str, Any]] | None) -> None:
        """The agent's answer for a candidate (and the tree operation it implies), atomically."""
        state = "proposed" if source is not None else "no_proposal"
        with self.transaction() as db:
            db.execute(
                "UPDATE candidates SET source = ?, description = ?, knobs_json = ?, cost_json = ?, state = ?"
                " WHERE id = ?",
                (source, description, json.dumps(knobs, sort_keys=True), json.dumps(asdict(cost)), state, candidate_id),
            )
            db.executemany(
                "INSERT INTO llm_calls (candidate_id, card_id, model, prompt, response, prompt_tokens,"
                " completion_tokens, usd, latency_s, error) VALUES (?,?,?,?,?,?,?,?,?,?)",
                [(candidate_id, card_id, x.model, x.prompt, x.response, x.cost.prompt_tokens,
                  x.cost.completion_tokens, x.cost.usd, x.latency_s, x.error) for x in exchanges],
            )
            if tree_op is not None:
                _log_op(db, card_id, *tree_op)

    def put_result(self, result: CandidateResult, card_id: str, tree_op: tuple[str, dict[str, Any]]) -> None:
        """A finished evaluation, its artifact (kept as a blob), and the tree operation that reports
        it, atomically."""
        artifact_sha = None
        if result.artifact:
            artifact_sha = self.put_blob(result.artifact)
        with self.transaction() as db:
            db.execute(
                "INSERT OR REPLACE INTO results (candidate_id, status, result_json, latency_us, eager_latency_us,"
                " speedup, artifact_sha256, created_at) VALUES (?,?,?,?,?,?,?,?)",
                (
                    result.candidate_id,
                    result.status.value,
                    result_to_json(result),
                    result.latency_us,
                    result.eager_latency_us,
                    result.speedup,
                    artifact_sha,
                    time.time(),
                ),
            )
            db.execute("UPDATE candidates SET state = 'evaluated' WHERE id = ?", (result.candidate_id,))
            _log_op(db, card_id, *tree_op)

    def log_tree_op(self, card_id: str, op: str, args: dict[str, Any]) -> None:
        with self.transaction() as db:
            _log_op(db, card_id, op, args)

    def tree_ops(self, card_id: str) -> list[tuple[str, dict[str, Any]]]:
        return [
            (r["op"], json.loads(r["args_json"]))
            for r in self._query("SELECT op, args_json FROM tree_ops WHERE card_id = ? ORDER BY seq", (card_id,))
        ]

    def candidates(self, card_id: str | None = None) -> list[CandidateRow]:
        sql = "SELECT * FROM candidates" + (" WHERE card_id = ?" if card_id else "") + " ORDER BY card_id, seq"
        return [_candidate(r) for r in self._query(sql, (card_id,) if card_id else ())]

    def candidate(self, candidate_id: str) -> CandidateRow:
        rows = self._query("SELECT * FROM candidates WHERE id = ?", (candidate_id,))
        if not rows:
            raise LookupError(f"no candidate {candidate_id!r}")
        return _candidate(rows[0])

    def result(self, candidate_id: str) -> CandidateResult | None:
        """The candidate's result, without its artifact (:meth:`artifact`), or None before one."""
        rows = self._query("SELECT result_json FROM results WHERE candidate_id = ?", (candidate_id,))
        if not rows:
            return None
        return result_from_json(rows[0]["result_json"])

    def artifact(self, candidate_id: str) -> bytes | None:
        rows = self._query("SELECT artifact_sha256 FROM results WHERE candidate_id = ?", (candidate_id,))
        if not rows or not rows[0]["artifact_sha256"]:
            return None
        return self.get_blob(rows[0]["artifact_sha256"])

    def results(self, card_id: str) -> dict[str, CandidateResult]:
        """The card's results by candidate id, without their artifacts."""
        rows = self._query(
            "SELECT r.candidate_id, r.result_json FROM results r JOIN candidates c ON c.id = r.candidate_id"
            " WHERE c.card_id = ?",
            (card_id,),
        )
        return {r["candidate_id"]: result_from_json(r["result_json"]) for r in rows}

    def llm_calls(self, candidate_id: str) -> list[LlmExchange]:
        return [
            LlmExchange(
                model=r["model"], prompt=r["prompt"], response=r["response"], latency_s=r["latency_s"],
                error=r["error"],
                cost=Cost(prompt_tokens=r["prompt_tokens"], completion_tokens=r["completion_tokens"], usd=r["usd"],
                          llm_calls=1),
            )
            for r in self._query("SELECT * FROM llm_calls WHERE candidate_id = ? ORDER BY id", (candidate_id,))
        ]

    def total_cost(self, card_id: str | None = None) -> Cost:
        where, args = (" WHERE card_id = ?", (card_id,)) if card_id else ("", ())
        row = self._query(
            "SELECT COALESCE(SUM(prompt_tokens),0) p, COALESCE(SUM(completion_tokens),0) c,"
            f" COALESCE(SUM(usd),0) u, COUNT(*) n FROM llm_calls{where}", args,
        )[0]
        return Cost(prompt_tokens=row["p"], completion_tokens=row["c"], usd=row["u"], llm_calls=row["n"])

    def evaluation_count(self, card_id: str | None = None) -> int:
        sql = "SELECT COUNT(*) FROM results r JOIN candidates c ON c.id = r.candidate_id"
        args: tuple[Any, ...] = ()
        if card_id:
            sql, args = sql + " WHERE c.card_id = ?", (card_id,)
        return int(self._query(sql, args)[0][0])

    # -- events ------------------------------------------------------------------------------
    def add_event(self, kind: str, message: str, card_id: str = "", candidate_id: str = "", status: str = "") -> int:
        event_log.info("%s: %s", kind, message)
        with self.transaction() as db:
            cur = db.execute(
                "INSERT INTO events (ts, kind, message, card_id, candidate_id, status) VALUES (?,?,?,?,?,?)",
                (time.time(), kind, message, card_id, candidate_id, status),
            )
            return int(cur.lastrowid or 0)

    def events(self, after_seq: int = 0) -> list[sqlite3.Row]:
        return self._query("SELECT * FROM events WHERE seq > ? ORDER BY seq", (after_seq,))

    # -- blobs -------------------------------------------------------------------------------
    def put_blob(self, data: bytes) -> str:
        sha = blob_digest(data)
        path = self.run_dir / BLOBS_DIR / blob_file_name(sha)
        if not path.exists():
            tmp = path.with_suffix(".tmp")
            tmp.write_bytes(data)
            tmp.replace(path)
        return sha

    def get_blob(self, sha: str) -> bytes:
        return (self.run_dir / BLOBS_DIR / blob_file_name(sha)).read_bytes()


def _log_op(db: sqlite3.Connection, card_id: str, op: str, args: dict[str, Any]) -> None:
    db.execute("INSERT INTO tree_ops (card_id, op, args_json) VALUES (?,?,?)", (card_id, op, json.dumps(args)))


def _candidate(r: sqlite3.Row) -> CandidateRow:
    return CandidateRow(
        r["id"], r["card_id"], r["parent_id"], r["node_id"], r["seq"], r["source"], r["description"],
        json.loads(r["knobs_json"]), r["proposer"], r["state"], _cost(r["cost_json"]),
    )


_COST_FIELDS = {f.name for f in fields(Cost)}


def _cost(text: str) -> Cost:
    """A candidate's stored cost: the proposer's figures by name (``{}`` for a free proposal)."""
    return Cost(**{name: value for name, value in json.loads(text).items() if name in _COST_FIELDS})


def best_candidate(store: RunStore, card_id: str) -> tuple[CandidateRow, CandidateResult] | None:
    """The passing candidate with the highest speedup over eager, or None; its latency is known.

    Speedup, not raw latency, decides: each candidate's eager time is measured interleaved with
    it in the same process, so the ratio is robust to the machine getting busier between
    candidates.
    """
    results = store.results(card_id)
    passing = [(cid, r, r.latency_us) for cid, r in results.items() if r.passed and r.latency_us is not None]
    if not passing:
        return None
    cid, result, _ = max(passing, key=lambda p: (p[1].speedup or 0.0, -p[2], p[0]))
    return store.candidate(cid), result


def audit_class(result: CandidateResult | None) -> str:
    """What runs for a card: its best kernel's class when that kernel beats eager, else eager."""
    if result is None or result.speedup is None or result.speedup <= 1.0:
        return "fallback"
    return result.audit_class or "custom"


def package_inputs(run_dir: Path) -> tuple[ModelIdentity, list[KernelEntry], list[FallbackEntry]]:
    """What a .cast is built from: model identity, each selected card's best kernel, the fallbacks.

    ``forge_service.bundle`` exports these for ``packager build``; the run's own packaging uses them directly.
    """
    from kforge_domain.card import OperatorCard
    from packager.format import FallbackEntry, KernelEntry, ModelIdentity

    store = RunStore(run_dir)
    try:
        run = store.run_row()
        config = json.loads(run["config_json"])
        model = ModelIdentity(model_spec=config["model_spec"], name=run["model_name"], run_id=run["id"])
        kernels: list[KernelEntry] = []
        fallbacks: list[FallbackEntry] = []
        for row in store.cards():
            card = OperatorCard.from_json(row.card_json)
            best = best_candidate(store, row.id) if row.selected else None
            artifact = store.artifact(best[0].id) if best else None
            if best is None or artifact is None:
                reason = row.reason or ("no candidate passed verification" if row.selected else "not searched")
                fallbacks.append(FallbackEntry(card_id=row.id, op=card.op, reason=reason, calls=card.call_count))
                continue
            cand, result = best
            if result.figures is None:  # best_candidate picks only runs that passed
                raise AssertionError(f"the best candidate {cand.id} of card {row.id} never ran")
            kernels.append(KernelEntry.from_run(
                result.figures, card_id=row.id, kind=card.kind, op=card.op, card_json=row.card_json,
                backend="cuda" if result.arch.startswith("sm_") else "cpu", arch=result.arch,
                audit_class=result.audit_class or "custom", source=cand.source or "", artifact=artifact,
                source_sha256=result.source_sha256, compiler_flags=result.compiler_flags,
                toolchain=result.toolchain, candidate_id=cand.id,
            ))
        return model, kernels, fallbacks
    finally:
        store.close()
