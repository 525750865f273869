//! The one error type of the crate; the Python bindings map each variant to an exception.

use std::fmt;

#[derive(Debug)]
pub enum SearchError {
    /// A value outside its domain (a negative latency, an unknown config value, ...).
    InvalidArgument(String),
    /// No node has this id.
    UnknownNode(u64),
    /// The operation does not fit the node's state (telling a node twice, expanding a failed node).
    InvalidState(String),
    /// Snapshot bytes that do not describe a valid tree.
    InvalidSnapshot(String),
}

impl fmt::Display for SearchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidArgument(msg) | Self::InvalidState(msg) => f.write_str(msg),
            Self::UnknownNode(id) => write!(f, "no node with id {id}"),
            Self::InvalidSnapshot(reason) => write!(f, "invalid snapshot: {reason}"),
        }
    }
}

impl std::error::Error for SearchError {}
