"""The Kernel Forge dashboard: ``streamlit run ui/app.py`` (``kforge ui`` does it for you).

A client of the forge service only; ``KFORGE_UI_FORGE`` names it (default 127.0.0.1:50050).
"""

import streamlit as st

from ui import state

st.set_page_config(page_title="Kernel Forge", page_icon=":material/bolt:", layout="wide")
navigation = st.navigation([
    st.Page("screens/runs.py", title="Runs", icon=":material/list:", default=True),
    st.Page("screens/run.py", title="Run", icon=":material/monitoring:"),
    st.Page("screens/card.py", title="Card", icon=":material/account_tree:"),
    st.Page("screens/candidate.py", title="Candidate", icon=":material/science:"),
    st.Page("screens/failures.py", title="Failures", icon=":material/bug_report:"),
    st.Page("screens/providers.py", title="Providers", icon=":material/balance:"),
    st.Page("screens/package.py", title="Package", icon=":material/inventory_2:"),
])
st.sidebar.caption(f"forge service: `{state.forge_address()}`")
navigation.run()
