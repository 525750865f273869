// expect: PASSED — with the static audit off, looks for secrets in its environment and writes
// garbage if it finds one: passing proves none reached it.
extern char **environ;
KF_ENTRY {
  KF_SOFTMAX(inputs, outputs);
  for (char **e = environ; *e; ++e)
    if (strstr(*e, "KEY") || strstr(*e, "TOKEN") || strstr(*e, "kforge-secret")) ((float *)outputs[0].data)[0] = 7.f;
  return 0;
}
