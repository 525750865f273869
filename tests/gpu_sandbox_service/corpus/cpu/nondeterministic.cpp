// expect: WRONG_RESULT — within tolerance, but different on every other call.
static int calls = 0;
KF_ENTRY { KF_SOFTMAX(inputs, outputs); if (++calls % 2) ((float *)outputs[0].data)[0] *= 1.0000001f; return 0; }
