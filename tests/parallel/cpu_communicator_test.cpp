// The in-process communicator with 1, 2, 4 and 8 thread ranks: exact results, idle ranks, and
// misuse that must become an error on every rank instead of a hang.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "comm_cases.h"
#include "core/error.h"
#include "parallel/cpu_communicator.h"

using namespace deepinfer;
using namespace deepinfer::parallel;
using namespace std::chrono_literals;

TEST(CpuCommunicator, AllCollectivesExactWith1_2_4_8Ranks) {
  for (int n : {1, 2, 4, 8}) {
    SCOPED_TRACE("ranks " + std::to_string(n));
    run_cpu_ranks(n, [](Communicator& c) {
      comm_cases::HostMemory mem;
      comm_cases::all_cases(c, mem);
    });
  }
}

// Many back-to-back rounds: a rank racing ahead into the next collective must not see or change
// the buffers of the one before.
TEST(CpuCommunicator, BackToBackRoundsStayExact) {
  run_cpu_ranks(8, [](Communicator& c) {
    comm_cases::HostMemory mem;
    for (int round = 0; round < 50; ++round) {
      comm_cases::all_to_all_v_case(c, mem, round % 9 - 1);  // -1: nobody idle; else rank round%9-1 idle
      comm_cases::all_gather_case(c, mem);
      c.barrier();
    }
  });
}

TEST(CpuCommunicator, SendIsBufferedAndOrdered) {
  run_cpu_ranks(2, [](Communicator& c) {
    if (c.rank() == 0) {
      for (int i = 0; i < 5; ++i) c.send(&i, sizeof i, 1);  // returns before rank 1 receives
      c.send(nullptr, 0, 1);
    } else {
      for (int i = 0; i < 5; ++i) {
        int v = -1;
        c.recv(&v, sizeof v, 0);
        EXPECT_EQ(v, i);
      }
      c.recv(nullptr, 0, 0);
    }
  });
}

TEST(CpuCommunicator, DifferentCollectivesOnDifferentRanksAreAnError) {
  try {
    run_cpu_ranks(4, [](Communicator& c) {
      int x = c.rank(), all[4];
      if (c.rank() == 2) c.barrier();
      else c.all_gather(&x, all, sizeof x);
    });
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("called"), std::string::npos) << e.what();
  }
}

TEST(CpuCommunicator, SizesThatDisagreeAreAnError) {
  EXPECT_THROW(run_cpu_ranks(2, [](Communicator& c) {
                 int x[2] = {}, all[4];
                 c.all_gather(x, all, c.rank() == 0 ? 4 : 8);
               }),
               Error);
  EXPECT_THROW(run_cpu_ranks(3, [](Communicator& c) {
                 int buf[8] = {};
                 std::vector<size_t> sb(3, 4), so(3, 0), rb(3, 4), ro = {0, 4, 8};
                 if (c.rank() == 1) rb[0] = 8;  // expects more than rank 0 sends
                 c.all_to_all_v(buf, sb, so, buf + 4, rb, ro);
               }),
               Error);
  EXPECT_THROW(run_cpu_ranks(2, [](Communicator& c) {
                 int v[2] = {};
                 if (c.rank() == 0) c.send(v, 4, 1);
                 else c.recv(v, 8, 0);
               }),
               Error);
}

// A rank that skips a collective (returns early) makes the others fail at once, not hang.
TEST(CpuCommunicator, ARankThatLeavesIsAnErrorNotAHang) {
  try {
    run_cpu_ranks(4, [](Communicator& c) {
      if (c.rank() == 3) return;
      c.barrier();
    });
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has left"), std::string::npos) << e.what();
  }
  EXPECT_THROW(run_cpu_ranks(2, [](Communicator& c) {
                 int v = 0;
                 if (c.rank() == 0) c.recv(&v, sizeof v, 1);  // rank 1 never sends
               }),
               Error);
}

// The first failure is what the caller sees; ranks blocked in a collective are released.
TEST(CpuCommunicator, AnExceptionOnOneRankReleasesTheOthers) {
  std::atomic<int> released = 0;
  try {
    run_cpu_ranks(4, [&](Communicator& c) {
      if (c.rank() == 1) throw Error("bad request on rank 1");
      try {
        c.barrier();
      } catch (const Error&) {
        ++released;
        throw;
      }
    });
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "bad request on rank 1");
  }
  EXPECT_EQ(released.load(), 3);
}

// A rank stuck outside the communicator (it never calls the collective) hits the group's timeout.
TEST(CpuCommunicator, AWaitPastTheTimeoutIsAnError) {
  std::atomic<bool> stop = false;
  try {
    run_cpu_ranks(
        2,
        [&](Communicator& c) {
          if (c.rank() == 1) {
            while (!stop) std::this_thread::sleep_for(1ms);  // busy elsewhere, never arrives
            return;
          }
          try {
            c.barrier();
          } catch (...) {
            stop = true;
            throw;
          }
        },
        50ms);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("waited more than"), std::string::npos) << e.what();
  }
}

TEST(CpuCommunicator, BadArgumentsAreErrors) {
  EXPECT_THROW(CpuCommGroup(0), Error);
  EXPECT_THROW(run_cpu_ranks(2, [](Communicator& c) { c.send(nullptr, 0, 2); }), Error);
  EXPECT_THROW(run_cpu_ranks(1, [](Communicator& c) {
                 float x = 0;
                 c.reduce_scatter(&x, &x, 1, DType::I32);
               }),
               Error);
  EXPECT_THROW(run_cpu_ranks(2, [](Communicator& c) {
                 std::vector<size_t> one(1);
                 c.all_to_all_v(nullptr, one, one, nullptr, one, one);
               }),
               Error);
}
