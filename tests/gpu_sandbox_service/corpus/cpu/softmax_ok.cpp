// expect: PASSED
KF_ENTRY { KF_SOFTMAX(inputs, outputs); return 0; }
