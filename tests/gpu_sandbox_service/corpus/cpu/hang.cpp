// expect: TIMEOUT — never returns.
KF_ENTRY { volatile int64_t spin = 1; while (spin) { spin = spin + 1 | 1; } return 0; }
