"""``python -m gpu_sandbox_service sandbox eval ...``: the sandbox CLI without the kforge entry point."""

import sys

from gpu_sandbox_service.cli import main

sys.exit(main())
