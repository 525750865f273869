// expect: RUNTIME_ERROR — reports failure through the contract's return code.
KF_ENTRY { return 3; }
