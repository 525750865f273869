//! A [`Tree`] whose every operation is logged, so a search killed at any point reopens as the
//! identical tree.
//!
//! Recovery reads the latest snapshot (written every `snapshot_every` records, atomically by
//! rename) and replays the log records after it. The log is the source of truth: a missing or
//! unreadable snapshot only costs a full replay.

use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::journal::{sync_dir, Journal, LogHeader, LogStart, Record, LOG_FORMAT};
use crate::node::NodeId;
use crate::snapshot::TreeSnapshot;
use crate::{SearchConfig, SearchError, Tree};

/// Snapshot file contents: the tree as of `log_offset` bytes of the log.
#[derive(Serialize, Deserialize)]
struct SnapshotFile {
    log_offset: u64,
    tree: TreeSnapshot,
}

pub struct DurableTree {
    tree: Tree,
    journal: Option<Journal>,
    snapshot_every: u64,
    since_snapshot: u64,
}

/// Where the snapshot of the log at `log_path` lives: next to it, `<log>.snapshot`.
pub fn snapshot_path(log_path: &Path) -> PathBuf {
    let mut name = log_path.as_os_str().to_owned();
    name.push(".snapshot");
    PathBuf::from(name)
}

impl DurableTree {
    /// A new tree; with `log_path` (which must not exist yet) every operation is logged.
    pub fn create(
        config: SearchConfig,
        reference_latency_us: f64,
        log_path: Option<&Path>,
        snapshot_every: u64,
    ) -> Result<Self, SearchError> {
        let tree = Tree::new(config.clone(), reference_latency_us)?;
        let start = LogStart::Create {
            config,
            reference_latency_us,
        };
        Self::start(tree, start, log_path, snapshot_every)
    }

    /// A tree rebuilt from [`Tree::snapshot`] bytes; with `log_path` it continues in a new log.
    pub fn restore(
        data: &[u8],
        log_path: Option<&Path>,
        snapshot_every: u64,
    ) -> Result<Self, SearchError> {
        let tree = Tree::restore(data)?;
        let start = LogStart::Restore {
            snapshot: Box::new(TreeSnapshot::from(&tree)),
        };
        Self::start(tree, start, log_path, snapshot_every)
    }

    fn start(
        tree: Tree,
        start: LogStart,
        log_path: Option<&Path>,
        snapshot_every: u64,
    ) -> Result<Self, SearchError> {
        check_snapshot_every(snapshot_every)?;
        let journal = match log_path {
            None => None,
            Some(path) => {
                let header = LogHeader {
                    format: LOG_FORMAT.to_owned(),
                    start,
                };
                let journal = Journal::create(path, &header)?;
                remove_stale_snapshot(path)?;
                Some(journal)
            }
        };
        Ok(Self {
            tree,
            journal,
            snapshot_every,
            since_snapshot: 0,
        })
    }

    /// Reopens the log at `log_path`: the latest usable snapshot plus the records after it.
    pub fn open(log_path: &Path, snapshot_every: u64) -> Result<Self, SearchError> {
        check_snapshot_every(snapshot_every)?;
        let log = Journal::open(log_path)?;
        let corrupt = |reason: String| SearchError::corrupt(Some(log_path), reason);
        let (mut tree, mut replay_from) = match read_snapshot(log_path, &log.records) {
            Some((tree, index)) => (tree, index),
            None => {
                let tree = match log.header.start {
                    LogStart::Create {
                        config,
                        reference_latency_us,
                    } => Tree::new(config, reference_latency_us),
                    LogStart::Restore { snapshot } => snapshot.into_tree(),
                }
                .map_err(|e| corrupt(format!("line 1: {e}")))?;
                (tree, 0)
            }
        };
        let since_snapshot = (log.records.len() - replay_from) as u64;
        for (index, (record, _)) in log.records.iter().enumerate().skip(replay_from) {
            replay(&mut tree, record)
                .map_err(|reason| corrupt(format!("line {}: {reason}", index + 2)))?;
            replay_from = index + 1;
        }
        debug_assert_eq!(replay_from, log.records.len());
        Ok(Self {
            tree,
            journal: Some(log.journal),
            snapshot_every,
            since_snapshot,
        })
    }

    pub fn tree(&self) -> &Tree {
        &self.tree
    }

    /// Whether operations are logged (and may wait on the disk).
    pub fn is_logged(&self) -> bool {
        self.journal.is_some()
    }

    pub fn log_path(&self) -> Option<&Path> {
        self.journal.as_ref().map(Journal::path)
    }

    pub fn ask(&mut self, n: usize) -> Result<Vec<NodeId>, SearchError> {
        self.check_writable()?;
        let parents = self.tree.ask(n);
        if self.journal.is_some() {
            self.record(&Record::Ask {
                n,
                parents: parents.clone(),
            })?;
        }
        Ok(parents)
    }

    pub fn release(&mut self, parent: NodeId) -> Result<(), SearchError> {
        self.check_writable()?;
        self.tree.release(parent)?;
        self.record(&Record::Release { parent })
    }

    pub fn add_child(&mut self, parent: NodeId) -> Result<NodeId, SearchError> {
        self.check_writable()?;
        let child = self.tree.add_child(parent)?;
        self.record(&Record::AddChild { parent, child })?;
        Ok(child)
    }

    pub fn tell(
        &mut self,
        node: NodeId,
        passed: bool,
        latency_us: Option<f64>,
        spread_us: Option<f64>,
    ) -> Result<(), SearchError> {
        self.check_writable()?;
        self.tree.tell(node, passed, latency_us, spread_us)?;
        self.record(&Record::Tell {
            node,
            passed,
            latency_us,
            spread_us,
        })
    }

    pub fn cancel(&mut self, node: NodeId) -> Result<(), SearchError> {
        self.check_writable()?;
        self.tree.cancel(node)?;
        self.record(&Record::Cancel { node })
    }

    /// Writes a snapshot now (no-op without a log), so reopening replays nothing.
    pub fn checkpoint(&mut self) -> Result<(), SearchError> {
        let Some(journal) = &self.journal else {
            return Ok(());
        };
        let path = snapshot_path(journal.path());
        let temporary = {
            let mut name = path.as_os_str().to_owned();
            name.push(".tmp");
            PathBuf::from(name)
        };
        let contents = SnapshotFile {
            log_offset: journal.offset(),
            tree: TreeSnapshot::from(&self.tree),
        };
        let data = serde_json::to_vec(&contents).expect("snapshots always serialise");
        let write = || -> std::io::Result<()> {
            let mut file = fs::File::create(&temporary)?;
            std::io::Write::write_all(&mut file, &data)?;
            file.sync_all()?;
            fs::rename(&temporary, &path)
        };
        write().map_err(|e| SearchError::io(&path, "write the snapshot", e))?;
        if let Some(dir) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            sync_dir(dir);
        }
        self.since_snapshot = 0;
        Ok(())
    }

    /// Refuses to change the tree once its log can no longer follow it.
    fn check_writable(&self) -> Result<(), SearchError> {
        self.journal
            .as_ref()
            .map_or(Ok(()), Journal::check_writable)
    }

    fn record(&mut self, record: &Record) -> Result<(), SearchError> {
        let Some(journal) = &mut self.journal else {
            return Ok(());
        };
        journal.append(record)?;
        self.since_snapshot += 1;
        if self.since_snapshot >= self.snapshot_every {
            self.checkpoint().map_err(|e| {
                SearchError::InvalidState(format!(
                    "the operation was logged, but the periodic snapshot failed: {e}"
                ))
            })?;
        }
        Ok(())
    }
}

fn check_snapshot_every(snapshot_every: u64) -> Result<(), SearchError> {
    if snapshot_every == 0 {
        return Err(SearchError::InvalidArgument(
            "snapshot_every must be at least 1".into(),
        ));
    }
    Ok(())
}

fn remove_stale_snapshot(log_path: &Path) -> Result<(), SearchError> {
    let path = snapshot_path(log_path);
    match fs::remove_file(&path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(SearchError::io(&path, "remove the old snapshot", e))
        }
        _ => Ok(()),
    }
}

/// The snapshot's tree and the index of the first record after it, when the snapshot is readable
/// and ends exactly at a record boundary of this log.
fn read_snapshot(log_path: &Path, records: &[(Record, u64)]) -> Option<(Tree, usize)> {
    let data = fs::read(snapshot_path(log_path)).ok()?;
    let contents: SnapshotFile = serde_json::from_slice(&data).ok()?;
    let index = records
        .iter()
        .position(|&(_, end)| end == contents.log_offset)?
        + 1;
    Some((contents.tree.into_tree().ok()?, index))
}

/// Applies one logged operation and checks that it reproduces the logged outcome.
fn replay(tree: &mut Tree, record: &Record) -> Result<(), String> {
    match record {
        Record::Ask { n, parents } => {
            let again = tree.ask(*n);
            if &again != parents {
                return Err(format!(
                    "ask({n}) chose {again:?} on replay, but the log has {parents:?}"
                ));
            }
        }
        Record::Release { parent } => tree.release(*parent).map_err(|e| e.to_string())?,
        Record::AddChild { parent, child } => {
            let again = tree.add_child(*parent).map_err(|e| e.to_string())?;
            if again != *child {
                return Err(format!(
                    "add_child({parent}) made node {again} on replay, but the log has {child}"
                ));
            }
        }
        Record::Tell {
            node,
            passed,
            latency_us,
            spread_us,
        } => {
            tree.tell(*node, *passed, *latency_us, *spread_us)
                .map_err(|e| e.to_string())?;
        }
        Record::Cancel { node } => tree.cancel(*node).map_err(|e| e.to_string())?,
    }
    Ok(())
}
