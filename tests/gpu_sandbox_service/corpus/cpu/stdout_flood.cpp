// expect: RUNTIME_ERROR — writes 200 MB to stdout.
KF_ENTRY {
  static char line[1 << 20];
  memset(line, 'x', sizeof line - 1);
  for (int i = 0; i < 200; ++i) fputs(line, stdout);
  KF_SOFTMAX(inputs, outputs);
  return 0;
}
