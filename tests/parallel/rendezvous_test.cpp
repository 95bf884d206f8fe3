// The TCP rendezvous on loopback: a thread per rank, a process per rank, and the ways it goes
// wrong (a rank that never comes, disagreeing world sizes, a rank number twice, bad arguments).
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <mutex>
#include <thread>

#include "core/error.h"
#include "parallel/rendezvous.h"

using namespace deepinfer;
using namespace deepinfer::parallel;
using namespace std::chrono_literals;

namespace {

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t n = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n);
  ::close(fd);
  return ntohs(a.sin_port);
}

const std::vector<uint8_t> kId = [] {
  std::vector<uint8_t> v(128);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<uint8_t>(i * 7 + 1);
  return v;
}();

RendezvousConfig config(int port, int rank, int world, std::chrono::milliseconds timeout = 20s) {
  RendezvousConfig c;
  c.master_port = port, c.rank = rank, c.world_size = world, c.timeout = timeout;
  return c;
}

// Runs rendezvous on one thread per config; returns each rank's error text ("" when it succeeded).
std::vector<std::string> run_threads(const std::vector<RendezvousConfig>& configs) {
  std::vector<std::string> errors(configs.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < configs.size(); ++i)
    threads.emplace_back([&, i] {
      try {
        const auto got = rendezvous(configs[i], configs[i].rank == 0 ? kId : std::vector<uint8_t>{});
        if (got != kId) errors[i] = "wrong payload";
      } catch (const Error& e) {
        errors[i] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

}  // namespace

TEST(Rendezvous, AThreadPerRankOnLoopback) {
  const int port = free_port();
  std::vector<RendezvousConfig> cs;
  for (int r : {3, 1, 0, 2}) cs.push_back(config(port, r, 4));  // any start order
  for (const auto& e : run_threads(cs)) EXPECT_EQ(e, "");
}

TEST(Rendezvous, AProcessPerRankOnLoopback) {
  const int port = free_port();
  std::vector<pid_t> children;
  for (int r = 1; r < 4; ++r) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {  // the child: one rank, exit code 0 when it got rank 0's bytes
      int code = 1;
      try {
        code = rendezvous(config(port, r, 4), {}) == kId ? 0 : 2;
      } catch (...) {
        code = 3;
      }
      ::_exit(code);
    }
    children.push_back(pid);
  }
  EXPECT_EQ(rendezvous(config(port, 0, 4), kId), kId);
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "a rank's process ended with " << status;
  }
}

TEST(Rendezvous, ARankThatNeverComesIsATimeoutNamingIt) {
  const auto errors = run_threads({config(free_port(), 0, 3, 300ms)});
  EXPECT_NE(errors[0].find("rank(s) 1, 2 did not join"), std::string::npos) << errors[0];
  const auto peer = run_threads({config(free_port(), 1, 2, 200ms)});  // rank 0 never listens
  EXPECT_NE(peer[0].find("could not reach rank 0"), std::string::npos) << peer[0];
}

TEST(Rendezvous, DisagreeingWorldSizesFailOnBothSides) {
  const int port = free_port();
  const auto errors = run_threads({config(port, 0, 2), config(port, 1, 3)});
  EXPECT_NE(errors[0].find("says the world has 3 ranks"), std::string::npos) << errors[0];
  EXPECT_NE(errors[1].find("rank 0 rejected rank 1"), std::string::npos) << errors[1];
}

TEST(Rendezvous, TwoRanksWithOneNumberFail) {
  const int port = free_port();
  const auto errors = run_threads({config(port, 0, 3), config(port, 1, 3), config(port, 1, 3)});
  EXPECT_NE(errors[0].find("two ranks claim rank 1"), std::string::npos) << errors[0];
  EXPECT_NE(errors[1] + errors[2], "");
}

TEST(Rendezvous, OneRankNeedsNoNetworkAndBadArgumentsAreErrors) {
  EXPECT_EQ(rendezvous(config(1, 0, 1), kId), kId);
  EXPECT_THROW(rendezvous(config(0, 0, 2), kId), Error);
  EXPECT_THROW(rendezvous(config(29500, 2, 2), kId), Error);
  EXPECT_THROW(rendezvous(config(29500, 0, 0), kId), Error);
}
