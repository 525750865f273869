//! The one error type of the crate; the Python bindings map each variant to an exception.

use std::fmt;
use std::path::PathBuf;

#[derive(Debug)]
pub enum SearchError {
    /// A value outside its domain (a negative latency, an unknown config value, ...).
    InvalidArgument(String),
    /// No node has this id.
    UnknownNode(u64),
    /// The operation does not fit the node's state (telling a node twice, expanding a failed node).
    InvalidState(String),
    /// Reading or writing the log or a snapshot failed.
    Io {
        path: PathBuf,
        action: &'static str,
        source: std::io::Error,
    },
    /// The log or a snapshot does not describe a valid tree.
    Corrupt {
        path: Option<PathBuf>,
        reason: String,
    },
}

impl SearchError {
    pub(crate) fn io(path: &std::path::Path, action: &'static str, source: std::io::Error) -> Self {
        Self::Io {
            path: path.to_path_buf(),
            action,
            source,
        }
    }

    pub(crate) fn corrupt(path: Option<&std::path::Path>, reason: impl Into<String>) -> Self {
        Self::Corrupt {
            path: path.map(std::path::Path::to_path_buf),
            reason: reason.into(),
        }
    }
}

impl fmt::Display for SearchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidArgument(msg) | Self::InvalidState(msg) => f.write_str(msg),
            Self::UnknownNode(id) => write!(f, "no node with id {id}"),
            Self::Io {
                path,
                action,
                source,
            } => write!(f, "cannot {action} {}: {source}", path.display()),
            Self::Corrupt {
                path: Some(path),
                reason,
            } => write!(f, "{}: {reason}", path.display()),
            Self::Corrupt { path: None, reason } => f.write_str(reason),
        }
    }
}

impl std::error::Error for SearchError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}
