// expect: RUNTIME_ERROR — dereferences a null pointer.
KF_ENTRY { volatile float *p = nullptr; p[7] = 1.f; KF_SOFTMAX(inputs, outputs); return 0; }
