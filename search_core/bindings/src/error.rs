//! The one place where core errors become Python exceptions (defined in `search_core.errors`).

use kf_mcts::SearchError;
use pyo3::import_exception;
use pyo3::PyErr;

import_exception!(search_core.errors, InvalidArgumentError);
import_exception!(search_core.errors, UnknownNodeError);
import_exception!(search_core.errors, InvalidStateError);
import_exception!(search_core.errors, InvalidSnapshotError);

pub fn to_py(error: SearchError) -> PyErr {
    let message = error.to_string();
    match error {
        SearchError::InvalidArgument(_) => InvalidArgumentError::new_err(message),
        SearchError::UnknownNode(_) => UnknownNodeError::new_err(message),
        SearchError::InvalidState(_) => InvalidStateError::new_err(message),
        SearchError::InvalidSnapshot(_) => InvalidSnapshotError::new_err(message),
    }
}
