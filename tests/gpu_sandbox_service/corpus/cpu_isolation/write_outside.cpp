// expect: PASSED — with the static audit off, tries to create @PATH@; the test checks it does not exist.
KF_ENTRY {
  FILE *f = fopen("@PATH@", "w");
  if (f) { fputs("escaped", f); fclose(f); }
  KF_SOFTMAX(inputs, outputs);
  return 0;
}
