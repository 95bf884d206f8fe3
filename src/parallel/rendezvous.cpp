#include "parallel/rendezvous.h"

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "core/error.h"

namespace deepinfer::parallel {

namespace {

using Clock = std::chrono::steady_clock;
constexpr uint8_t kMagic[4] = {'D', 'I', 'R', 'V'};
constexpr uint32_t kMaxPayload = 1 << 20;

class Socket {  // closes on scope exit
 public:
  explicit Socket(int fd = -1) : fd_(fd) {}
  Socket(Socket&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Socket& operator=(Socket&& o) noexcept {
    std::swap(fd_, o.fd_);
    return *this;
  }
  ~Socket() {
    if (fd_ >= 0) ::close(fd_);
  }
  int fd() const { return fd_; }

 private:
  int fd_;
};

int ms_left(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left > 0 ? static_cast<int>(left) : 0;
}

// Waits until fd is readable; false at the deadline.
bool wait_readable(int fd, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    const int r = ::poll(&p, 1, ms_left(deadline));
    if (r > 0) return true;
    if (r == 0) return false;
    if (errno != EINTR) fail("rendezvous: poll: ", std::strerror(errno));
  }
}

void read_full(int fd, void* buf, size_t n, Clock::time_point deadline, const std::string& what) {
  auto* p = static_cast<uint8_t*>(buf);
  while (n) {
    check(wait_readable(fd, deadline), "rendezvous: timed out reading ", what);
    const ssize_t r = ::recv(fd, p, n, 0);
    if (r < 0 && errno == EINTR) continue;
    check(r > 0, "rendezvous: the connection closed while reading ", what);
    p += r, n -= static_cast<size_t>(r);
  }
}

void write_full(int fd, const void* buf, size_t n) {
  const auto* p = static_cast<const uint8_t*>(buf);
  while (n) {
    const ssize_t r = ::send(fd, p, n, MSG_NOSIGNAL);
    if (r < 0 && errno == EINTR) continue;
    check(r > 0, "rendezvous: send: ", std::strerror(errno));
    p += r, n -= static_cast<size_t>(r);
  }
}

void put_u32(std::vector<uint8_t>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

uint32_t get_u32(const uint8_t* p) { return p[0] | p[1] << 8 | p[2] << 16 | uint32_t(p[3]) << 24; }

// Rank 0's answer: status (0 ok, 1 rejected), length, payload or reason.
void send_frame(int fd, uint8_t status, const std::vector<uint8_t>& body) {
  std::vector<uint8_t> frame{status};
  put_u32(frame, static_cast<uint32_t>(body.size()));
  frame.insert(frame.end(), body.begin(), body.end());
  write_full(fd, frame.data(), frame.size());
}

void reject(int fd, const std::string& reason) {
  try {
    send_frame(fd, 1, std::vector<uint8_t>(reason.begin(), reason.end()));
  } catch (const Error&) {  // the peer may be gone already; the reason is thrown on rank 0 anyway
  }
}

std::vector<uint8_t> serve(const RendezvousConfig& c, const std::vector<uint8_t>& payload, Clock::time_point deadline) {
  Socket listener(::socket(AF_INET, SOCK_STREAM, 0));
  check(listener.fd() >= 0, "rendezvous: socket: ", std::strerror(errno));
  const int one = 1;
  ::setsockopt(listener.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(c.master_port));
  check(::bind(listener.fd(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0, "rendezvous: rank 0 cannot listen on port ",
        c.master_port, ": ", std::strerror(errno));
  check(::listen(listener.fd(), c.world_size) == 0, "rendezvous: listen: ", std::strerror(errno));

  std::vector<Socket> peers(c.world_size);
  int joined = 1;
  const auto fail_all = [&](const std::string& reason) {
    for (auto& p : peers)
      if (p.fd() >= 0) reject(p.fd(), reason);
    fail(reason);
  };
  while (joined < c.world_size) {
    if (!wait_readable(listener.fd(), deadline)) {
      std::string missing;
      for (int r = 1; r < c.world_size; ++r)
        if (peers[r].fd() < 0) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      fail_all("rendezvous: rank(s) " + missing + " did not join rank 0 on port " + std::to_string(c.master_port) +
               " within " + std::to_string(c.timeout.count()) + " ms");
    }
    Socket conn(::accept(listener.fd(), nullptr, nullptr));
    if (conn.fd() < 0) continue;
    uint8_t hello[12];
    try {
      read_full(conn.fd(), hello, sizeof hello, deadline, "a rank's hello");
    } catch (const Error&) {
      continue;  // not one of ours (a port scan, a dead peer): keep waiting for the ranks
    }
    if (std::memcmp(hello, kMagic, 4) != 0) continue;
    const uint32_t rank = get_u32(hello + 4), world = get_u32(hello + 8);
    std::string why;
    if (world != static_cast<uint32_t>(c.world_size))
      why = "rendezvous: rank " + std::to_string(rank) + " says the world has " + std::to_string(world) +
            " ranks, rank 0 says " + std::to_string(c.world_size);
    else if (rank == 0 || rank >= world)
      why = "rendezvous: a peer claims rank " + std::to_string(rank) + " in a world of " + std::to_string(world);
    else if (peers[rank].fd() >= 0)
      why = "rendezvous: two ranks claim rank " + std::to_string(rank);
    if (!why.empty()) {
      reject(conn.fd(), why);
      fail_all(why);
    }
    peers[rank] = std::move(conn);
    ++joined;
  }
  for (int r = 1; r < c.world_size; ++r) send_frame(peers[r].fd(), 0, payload);
  return payload;
}

std::vector<uint8_t> join(const RendezvousConfig& c, Clock::time_point deadline) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(c.master_addr.c_str(), std::to_string(c.master_port).c_str(), &hints, &found);
  check(rc == 0 && found, "rendezvous: cannot resolve master address '", c.master_addr, "': ", ::gai_strerror(rc));
  sockaddr_in addr;
  std::memcpy(&addr, found->ai_addr, sizeof addr);
  ::freeaddrinfo(found);
  Socket s;
  for (;;) {  // rank 0 may not be listening yet
    s = Socket(::socket(AF_INET, SOCK_STREAM, 0));
    check(s.fd() >= 0, "rendezvous: socket: ", std::strerror(errno));
    if (::connect(s.fd(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) break;
    check(ms_left(deadline) > 0, "rendezvous: rank ", c.rank, " could not reach rank 0 at ", c.master_addr, ":",
          c.master_port, " within ", c.timeout.count(), " ms (", std::strerror(errno), ")");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::vector<uint8_t> hello(kMagic, kMagic + 4);
  put_u32(hello, static_cast<uint32_t>(c.rank));
  put_u32(hello, static_cast<uint32_t>(c.world_size));
  write_full(s.fd(), hello.data(), hello.size());
  uint8_t head[5];
  read_full(s.fd(), head, sizeof head, deadline, "rank 0's answer (is every rank started?)");
  const uint32_t n = get_u32(head + 1);
  check(n <= kMaxPayload, "rendezvous: rank 0 sent ", n, " bytes, more than the 1 MiB limit");
  std::vector<uint8_t> body(n);
  read_full(s.fd(), body.data(), n, deadline, "rank 0's payload");
  check(head[0] == 0, "rendezvous: rank 0 rejected rank ", c.rank, ": ", std::string(body.begin(), body.end()));
  return body;
}

}  // namespace

std::vector<uint8_t> rendezvous(const RendezvousConfig& c, const std::vector<uint8_t>& payload) {
  check(c.world_size >= 1 && c.rank >= 0 && c.rank < c.world_size, "rendezvous: rank ", c.rank,
        " is outside a world of ", c.world_size);
  check(c.master_port > 0 && c.master_port < 65536, "rendezvous: master port ", c.master_port, " is not in 1..65535");
  check(payload.size() <= kMaxPayload, "rendezvous: a payload of ", payload.size(), " bytes is over the 1 MiB limit");
  if (c.world_size == 1) return payload;
  const auto deadline = Clock::now() + c.timeout;
  return c.rank == 0 ? serve(c, payload, deadline) : join(c, deadline);
}

}  // namespace deepinfer::parallel
