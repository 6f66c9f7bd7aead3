// Loopback TCP ports for the tests that start rendezvous servers (Gloo stores, the example trainer's launch):
// a port that was free a moment ago (another process may still take it; the tests retry or fail clearly),
// and whether something listens on one.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>

namespace flopmeter::testing {

// A TCP port on 127.0.0.1 that was free a moment ago; 0 if none could be bound.
inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof(address);
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
    port = ntohs(address.sin_port);
  }
  ::close(fd);
  return port;
}

// A port p with p and p + 1 both free right now (a job whose flopmeter store sits at port_offset 1); 0 if
// 50 tries found none.
inline int free_port_pair() {
  for (int attempt = 0; attempt < 50; ++attempt) {
    const int s = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    socklen_t len = sizeof addr;
    if (::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::getsockname(s, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      ::close(s);
      continue;
    }
    const int port = ntohs(addr.sin_port);
    const int t = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in next = addr;
    next.sin_port = htons(static_cast<std::uint16_t>(port + 1));
    const bool next_free = port < 65535 && ::bind(t, reinterpret_cast<sockaddr*>(&next), sizeof next) == 0;
    ::close(t);
    ::close(s);
    if (next_free) return port;
  }
  return 0;
}

// Whether something accepts TCP connections on 127.0.0.1:port right now.
inline bool port_accepts(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  ::close(fd);
  return ok;
}

}  // namespace flopmeter::testing
