// Helpers for tests that run real child processes: elapsed time, forking a child that runs a
// function under an alarm, a bounded wait for a child (killed when it overstays), and the
// check that it exited cleanly.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>

/// A check in code a child process runs (or a parent's helper shared with one), where a
/// GoogleTest assertion could not report: throws, saying what failed; the child's runner turns
/// it into a non-zero exit with the message.
#define XCHECK(cond, what)                                                                          \
    do {                                                                                            \
        if (!(cond)) throw std::runtime_error(std::string("check failed: ") + #cond + ": " + (what)); \
    } while (0)

namespace gvtest {

using Clock = std::chrono::steady_clock;

inline long ms_since(Clock::time_point t0) {
    return long(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count());
}

/// Runs body in a forked child; its return value is the exit code (100 for an exception,
/// whose message goes to stderr). The alarm makes sure a child never outlives a broken test.
inline pid_t spawn(const std::function<int()>& body, unsigned alarm_s = 15) {
    pid_t pid = fork();
    if (pid != 0) return pid;
    alarm(alarm_s);
    int rc;
    try {
        rc = body();
    } catch (const std::exception& e) {
        std::fprintf(stderr, "child %d: %s\n", int(getpid()), e.what());
        rc = 100;
    }
    _exit(rc);
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
