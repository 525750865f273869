// expect: WRONG_RESULT — writes zeros.
KF_ENTRY { memset(outputs[0].data, 0, kf_rows(&inputs[0]) * inputs[0].shape[1] * sizeof(float)); return 0; }
