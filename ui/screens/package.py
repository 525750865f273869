"""Package: the audit of a .cast, from a run, an upload or a path."""

from pathlib import Path

import streamlit as st

from ui import state
from ui.cast_audit import CastAudit, CastAuditError, audit_cast, audit_cast_bytes
from ui.client import ForgeError
from ui.selection import choose
from ui.views import package as view
from ui.views.formatting import run_label

FROM_RUN, UPLOAD, PATH = "A run's .cast", "Upload a .cast", "A path on the dashboard's host"

st.title("Package")
runs = [r for r in state.fetch(state.list_runs) if r.status == "done"]
source = st.radio("Read", [FROM_RUN, UPLOAD, PATH] if runs else [UPLOAD, PATH], horizontal=True)
audit: CastAudit | None = None
try:
    if source == FROM_RUN:
        labels = {r.run_id: run_label(r) for r in runs}
        run_id = choose("Run", "run", list(labels), page="package", format_func=labels.__getitem__)
        try:
            data = state.exported_cast(state.target_key(), run_id)
        except ForgeError as exc:
            st.info(f"No .cast for this run: {exc}")
            st.stop()
        audit = audit_cast_bytes(data, f"{run_id}.cast")
        st.download_button("Download the .cast", data, file_name=f"{run_id}.cast", mime="application/zip")
    elif source == UPLOAD:
        upload = st.file_uploader("A .cast file", type=["cast"])
        if upload is not None:
            audit = audit_cast_bytes(upload.getvalue(), upload.name)
    else:
        path = st.text_input("Path of a .cast")
        if path.strip():
            audit = audit_cast(Path(path.strip()).expanduser())
except CastAuditError as exc:
    st.error(f"Not a usable .cast: {exc}")
if audit is not None:
    view.render_audit(audit)
