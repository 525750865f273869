// expect: REJECTED — writes a file outside its work dir.
KF_ENTRY { FILE *f = fopen("/tmp/kforge-escaped", "w"); if (f) { fputs("x", f); fclose(f); } KF_SOFTMAX(inputs, outputs); return 0; }
