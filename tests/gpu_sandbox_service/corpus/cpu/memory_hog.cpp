// expect: RUNTIME_ERROR — allocates and touches memory until none is left.
KF_ENTRY {
  for (;;) {
    char *block = (char *)malloc(256 << 20);
    if (!block) abort();
    memset(block, 1, 256 << 20);
  }
}
