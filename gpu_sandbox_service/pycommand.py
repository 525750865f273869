"""How the sandbox starts Python children: isolated mode, with this process's import path.

``python -I`` keeps a candidate's environment (PYTHONPATH, user site, current directory) out of
the child, but then the child finds the project only if it is installed. Passing the parent's
import path explicitly works however the project is deployed (installed, or on PYTHONPATH).
"""

from __future__ import annotations

import sys
from pathlib import Path


def python_module_command(module: str) -> list[str]:
    """argv that runs ``python -m module`` isolated, importing from this process's sys.path."""
    paths = [p for p in sys.path if p and Path(p).is_dir()]
    boot = (f"import sys, runpy; sys.path[:0] = {paths!r}; "
            f"runpy.run_module({module!r}, run_name='__main__', alter_sys=True)")
    return [sys.executable, "-I", "-c", boot]
