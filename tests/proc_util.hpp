// Helpers for tests that run real child processes: elapsed time, a bounded wait for a child
// (killed when it overstays), and the check that it exited cleanly.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

namespace gvtest {

using Clock = std::chrono::steady_clock;

inline long ms_since(Clock::time_point t0) {
    return long(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count());
}

/// Waits for a child up to timeout_ms (then kills it and records a failure). Returns the raw
/// wait status, or -1.
inline int wait_child(pid_t pid, int timeout_ms) {
    auto t0 = Clock::now();
    for (;;) {
        int st = 0;
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid) return st;
        if (r < 0) return -1;
        if (ms_since(t0) > timeout_ms) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            ADD_FAILURE() << "child " << pid << " did not finish within " << timeout_ms << " ms";
            return -1;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
}

inline void expect_exit_ok(int st) {
    EXPECT_TRUE(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0)
        << "child: status " << st << " (exited " << (WIFEXITED(st) ? WEXITSTATUS(st) : -1) << ", signal "
        << (WIFSIGNALED(st) ? WTERMSIG(st) : 0) << ")";
}

}  // namespace gvtest
