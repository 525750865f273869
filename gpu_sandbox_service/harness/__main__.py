"""Entry point of a harness process: ``python -I -m gpu_sandbox_service.harness`` in a run dir."""

from __future__ import annotations

import ctypes
import os
import sys
import traceback
from pathlib import Path

from gpu_sandbox_service.harness.phases import Phases, wait_for_turn
from gpu_sandbox_service.harness.protocol import REQUEST_FILE, HarnessReport, HarnessRequest
from gpu_sandbox_service.harness.reference import CardError
from gpu_sandbox_service.harness.session import CandidateFailure, run_session
from gpu_sandbox_service.models import CandidateStatus


def main() -> int:
    result = os.fdopen(int(os.environ["KF_RESULT_FD"]), "wb")
    wait_for_turn()
    phases = Phases()
    try:
        report = run_session(HarnessRequest.model_validate_json(Path(REQUEST_FILE).read_text()), phases.prepared)
    except CandidateFailure as failure:
        report = HarnessReport(status=failure.status, error_message=str(failure))
    except CardError as exc:
        report = HarnessReport(status=CandidateStatus.RUNTIME_ERROR, setup_error=str(exc))
    except Exception as exc:  # a CUDA error surfaces here as RuntimeError, among others
        traceback.print_exc(file=sys.stderr)
        report = HarnessReport(status=CandidateStatus.RUNTIME_ERROR, error_message=f"{type(exc).__name__}: {exc}")
    report.prepared_at_s, report.checks_at_s = phases.prepared_at_s, phases.checks_at_s
    result.write(report.model_dump_json().encode())
    result.close()
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    ctypes.CDLL(None).fflush(None)  # the candidate's printf buffers, which os._exit would drop
    os._exit(code)  # no interpreter teardown: a broken candidate may have left the process unsound
