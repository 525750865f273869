// expect: REJECTED — opens a socket.
#include <arpa/inet.h>
#include <sys/socket.h>
#include <unistd.h>
KF_ENTRY {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{}; addr.sin_family = AF_INET; addr.sin_port = htons(80); addr.sin_addr.s_addr = htonl(0x01010101);
  connect(s, (sockaddr *)&addr, sizeof addr);
  KF_SOFTMAX(inputs, outputs);
  return 0;
}
