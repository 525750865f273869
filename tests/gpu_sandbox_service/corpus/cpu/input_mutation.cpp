// expect: WRONG_RESULT — correct output, but scribbles on its input.
KF_ENTRY { KF_SOFTMAX(inputs, outputs); ((float *)inputs[0].data)[0] = 0.f; return 0; }
