// expect: RUNTIME_ERROR — ends the process "successfully" before the harness can report.
KF_ENTRY { KF_SOFTMAX(inputs, outputs); exit(0); }
