// expect: PASSED — with the static audit off, leaves a detached child behind; the test checks that
// no process named kf-orphan survives the evaluation.
#include <sys/prctl.h>
#include <unistd.h>
KF_ENTRY {
  static bool forked = false;
  if (!forked) {
    forked = true;
    if (fork() == 0) { setsid(); prctl(PR_SET_NAME, "kf-orphan", 0, 0, 0); for (;;) pause(); }
  }
  KF_SOFTMAX(inputs, outputs);
  return 0;
}
