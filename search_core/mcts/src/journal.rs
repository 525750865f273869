//! The append-only log: one JSON record per line, a header line first.
//!
//! Every record is written with a single `write` as soon as its operation is applied, so a
//! killed process loses nothing the caller saw acknowledged; results (`tell`, `cancel`) are
//! also fsync'd, so a power loss keeps every evaluation that was paid for. A last line without
//! its newline was never acknowledged and is dropped when the log is opened.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::node::NodeId;
use crate::snapshot::TreeSnapshot;
use crate::{SearchConfig, SearchError};

pub(crate) const LOG_FORMAT: &str = "kf-mcts-log/1";

/// How the tree of a log starts: fresh, or from a snapshot restored into a new log.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum LogStart {
    Create {
        config: SearchConfig,
        reference_latency_us: f64,
    },
    Restore {
        snapshot: Box<TreeSnapshot>,
    },
}

#[derive(Serialize, Deserialize)]
pub(crate) struct LogHeader {
    pub format: String,
    pub start: LogStart,
}

/// One operation on the tree, with its outcome where replay must reproduce it.
#[derive(Serialize, Deserialize, Debug, PartialEq)]
#[serde(tag = "op", rename_all = "snake_case")]
pub(crate) enum Record {
    Ask {
        n: usize,
        parents: Vec<NodeId>,
    },
    Release {
        parent: NodeId,
    },
    AddChild {
        parent: NodeId,
        child: NodeId,
    },
    Tell {
        node: NodeId,
        passed: bool,
        latency_us: Option<f64>,
        spread_us: Option<f64>,
    },
    Cancel {
        node: NodeId,
    },
}

impl Record {
    fn is_result(&self) -> bool {
        matches!(self, Self::Tell { .. } | Self::Cancel { .. })
    }
}

/// The open log file, positioned at its end.
pub(crate) struct Journal {
    file: File,
    path: PathBuf,
    /// Bytes of complete records in the file.
    offset: u64,
    /// Set after a failed write: the file may no longer match the tree.
    broken: bool,
}

/// A log read back: its header and its complete records with the offset after each.
pub(crate) struct ReadLog {
    pub header: LogHeader,
    pub records: Vec<(Record, u64)>,
    pub journal: Journal,
}

impl Journal {
    /// Starts a new log at `path`, which must not exist.
    pub fn create(path: &Path, header: &LogHeader) -> Result<Self, SearchError> {
        let file = OpenOptions::new()
            .create_new(true)
            .append(true)
            .open(path)
            .map_err(|e| SearchError::io(path, "create the search log", e))?;
        let mut journal = Self {
            file,
            path: path.to_path_buf(),
            offset: 0,
            broken: false,
        };
        journal.write_line(
            &serde_json::to_vec(header).expect("headers always serialise"),
            true,
        )?;
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            sync_dir(parent);
        }
        Ok(journal)
    }

    /// Reads the log at `path`, drops an unfinished last line, and keeps the file open for appends.
    pub fn open(path: &Path) -> Result<ReadLog, SearchError> {
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .open(path)
            .map_err(|e| SearchError::io(path, "open the search log", e))?;
        let mut data = Vec::new();
        file.read_to_end(&mut data)
            .map_err(|e| SearchError::io(path, "read the search log", e))?;
        let complete = data.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        if complete < data.len() {
            file.set_len(complete as u64)
                .map_err(|e| SearchError::io(path, "truncate the search log", e))?;
            file.sync_all()
                .map_err(|e| SearchError::io(path, "sync the search log", e))?;
        }
        file.seek(SeekFrom::End(0))
            .map_err(|e| SearchError::io(path, "seek in the search log", e))?;
        let mut lines = data[..complete].split_inclusive(|&b| b == b'\n');
        let corrupt = |line: usize, reason: String| {
            SearchError::corrupt(Some(path), format!("line {line}: {reason}"))
        };
        let header_line = lines
            .next()
            .ok_or_else(|| corrupt(1, "the log has no header".into()))?;
        let header: LogHeader =
            serde_json::from_slice(header_line).map_err(|e| corrupt(1, e.to_string()))?;
        if header.format != LOG_FORMAT {
            return Err(corrupt(
                1,
                format!(
                    "format {:?} is not the supported {LOG_FORMAT:?}",
                    header.format
                ),
            ));
        }
        let mut offset = header_line.len() as u64;
        let mut records = Vec::new();
        for (index, line) in lines.enumerate() {
            let record: Record =
                serde_json::from_slice(line).map_err(|e| corrupt(index + 2, e.to_string()))?;
            offset += line.len() as u64;
            records.push((record, offset));
        }
        let journal = Self {
            file,
            path: path.to_path_buf(),
            offset,
            broken: false,
        };
        Ok(ReadLog {
            header,
            records,
            journal,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn offset(&self) -> u64 {
        self.offset
    }

    pub fn append(&mut self, record: &Record) -> Result<(), SearchError> {
        let line = serde_json::to_vec(record).expect("records always serialise");
        self.write_line(&line, record.is_result())
    }

    pub fn check_writable(&self) -> Result<(), SearchError> {
        if self.broken {
            return Err(SearchError::InvalidState(format!(
                "{}: an earlier write failed, so this log no longer matches the tree; reopen it",
                self.path.display()
            )));
        }
        Ok(())
    }

    fn write_line(&mut self, line: &[u8], sync: bool) -> Result<(), SearchError> {
        self.check_writable()?;
        let mut buffer = Vec::with_capacity(line.len() + 1);
        buffer.extend_from_slice(line);
        buffer.push(b'\n');
        let written = self.file.write_all(&buffer).and_then(|()| {
            if sync {
                self.file.sync_data()
            } else {
                Ok(())
            }
        });
        if let Err(e) = written {
            self.broken = true;
            return Err(SearchError::io(&self.path, "append to the search log", e));
        }
        self.offset += buffer.len() as u64;
        Ok(())
    }
}

/// Makes a created or renamed entry durable (best effort: not every platform syncs directories).
pub(crate) fn sync_dir(dir: &Path) {
    if let Ok(handle) = File::open(dir) {
        let _ = handle.sync_all();
    }
}
