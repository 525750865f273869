// expect: WRONG_RESULT — one NaN in an otherwise correct output.
KF_ENTRY { KF_SOFTMAX(inputs, outputs); ((float *)outputs[0].data)[5] = NAN; return 0; }
