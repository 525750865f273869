// expect: PASSED — with the static audit off, connects to a port the test listens on (@PORT@) and
// writes garbage if the connection succeeds: passing proves the network is out of reach.
#include <arpa/inet.h>
#include <sys/socket.h>
#include <unistd.h>
KF_ENTRY {
  KF_SOFTMAX(inputs, outputs);
  int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{}; addr.sin_family = AF_INET; addr.sin_port = htons(@PORT@); addr.sin_addr.s_addr = htonl(0x7f000001);
  if (s >= 0 && connect(s, (sockaddr *)&addr, sizeof addr) == 0) ((float *)outputs[0].data)[0] = 7.f;
  if (s >= 0) close(s);
  return 0;
}
