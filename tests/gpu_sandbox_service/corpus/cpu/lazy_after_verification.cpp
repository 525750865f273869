// expect: WRONG_RESULT — correct for the first calls, then stops computing (to look fast when timed).
static int calls = 0;
KF_ENTRY { if (++calls <= 8) KF_SOFTMAX(inputs, outputs); return 0; }
