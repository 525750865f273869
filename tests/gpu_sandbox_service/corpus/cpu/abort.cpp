// expect: RUNTIME_ERROR — aborts the process.
KF_ENTRY { abort(); }
