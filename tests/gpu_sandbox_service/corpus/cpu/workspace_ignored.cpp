// expect: RUNTIME_ERROR — asks for a workspace but expects only the op's outputs: kf_launch returns 2.
extern "C" int64_t kf_workspace_bytes(void) { return 1024; }
KF_ENTRY { if (n_outputs != 1) return 2; KF_SOFTMAX(inputs, outputs); return 0; }
