// expect: REJECTED — forks a process.
#include <unistd.h>
KF_ENTRY { if (fork() == 0) { for (;;) pause(); } KF_SOFTMAX(inputs, outputs); return 0; }
