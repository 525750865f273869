"""What `kforge ... --json` prints for scripts."""

from forge_service.cli import as_json
from kernel_forge.forge.v1 import messages_pb2 as forge_pb2


def test_zero_counts_are_printed_and_an_unmeasured_speedup_is_not() -> None:
    printed = as_json(forge_pb2.Run(run_id="r1", status="failed"))
    assert printed["cards_total"] == 0 and printed["evaluations_done"] == 0 and printed["run_id"] == "r1"
    assert "best_e2e_speedup" not in printed
    assert as_json(forge_pb2.Run(best_e2e_speedup=1.5))["best_e2e_speedup"] == 1.5
