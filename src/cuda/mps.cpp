// gv::mps: talks to the CUDA MPS control daemon through `nvidia-cuda-mps-control`, run in a
// child process with a deadline. No CUDA calls (see include/gpuverbs/mps.hpp).
#include "gpuverbs/mps.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace gv::mps {
namespace {

constexpr const char* kProgram = "nvidia-cuda-mps-control";
constexpr int kProbeTimeoutMs = 3000;
constexpr int kStartTimeoutMs = 10000;    // `-d` forks the daemon and returns at once
constexpr int kUpTimeoutMs = 5000;        // for the daemon to answer after a start
constexpr int kFailedUpTimeoutMs = 1000;  // the same after a failed start (a racing start)

const char* const kWhy =
    "two GPU processes on one GPU time-slice without MPS (milliseconds per round trip instead of "
    "microseconds)";
const char* const kHow =
    "start it with `nvidia-cuda-mps-control -d` (as the GPU's owner or root) before the processes "
    "initialize CUDA";

using Clock = std::chrono::steady_clock;

std::string control_path() { return pipe_directory() + "/control"; }

/// `nvidia-cuda-mps-control` in PATH, or "".
std::string find_program() {
    const char* path = std::getenv("PATH");
    std::string p = path ? path : "";
    size_t start = 0;
    while (start <= p.size()) {
        size_t end = p.find(':', start);
        if (end == std::string::npos) end = p.size();
        std::string dir = p.substr(start, end - start);
        if (dir.empty()) dir = ".";
        std::string f = dir + "/" + kProgram;
        if (access(f.c_str(), X_OK) == 0) return f;
        start = end + 1;
    }
    return "";
}

struct RunResult {
    bool started = false;    // fork and exec worked (exit status 127 reads as not started)
    bool timed_out = false;  // killed at the deadline
    int status = -1;         // exit status; -1 when unknown (killed, or SIGCHLD ignored)
    std::string output;      // stdout and stderr together, at most 64 KiB
};

/// A memfd holding `text`, positioned at its start (stdin of a child), or -1.
int memfd_with(const std::string& text) {
    int fd = int(syscall(SYS_memfd_create, "gv-mps", 1u /* MFD_CLOEXEC */));
    if (fd < 0) return -1;
    size_t off = 0;
    while (off < text.size()) {
        ssize_t w = write(fd, text.data() + off, text.size() - off);
        if (w <= 0) {
            close(fd);
            return -1;
        }
        off += size_t(w);
    }
    lseek(fd, 0, SEEK_SET);
    return fd;
}

/// Runs `prog args...` with `input` on its stdin, its stdout and stderr captured in a memfd
/// (not a pipe: `-d` leaves a daemon behind that inherits them, and a pipe would not see
/// end-of-file while it lives). Killed (its process group) after timeout_ms.
RunResult run(const std::string& prog, const std::vector<std::string>& args, const std::string& input,
              int timeout_ms) {
    RunResult res;
    int in = memfd_with(input);
    int out = memfd_with("");
    if (in < 0 || out < 0) {
        if (in >= 0) close(in);
        if (out >= 0) close(out);
        res.output = std::string("memfd_create failed: ") + std::strerror(errno);
        return res;
    }
    // Everything the child needs is prepared before fork: it only calls async-signal-safe
    // functions (the parent may have other threads).
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(prog.c_str()));
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    long max_fd = sysconf(_SC_OPEN_MAX);
    if (max_fd < 0 || max_fd > 65536) max_fd = 65536;

    pid_t pid = fork();
    if (pid < 0) {
        res.output = std::string("fork failed: ") + std::strerror(errno);
        close(in);
        close(out);
        return res;
    }
    if (pid == 0) {
        setpgid(0, 0);
        if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(out, 2) < 0) _exit(127);
        // Only the three standard descriptors go to the child (and to a daemon it leaves).
        bool closed = false;
#if defined(SYS_close_range)
        closed = syscall(SYS_close_range, 3u, ~0u, 0u) == 0;
#endif
        if (!closed)
            for (long fd = 3; fd < max_fd; ++fd) close(int(fd));
        execv(prog.c_str(), argv.data());
        _exit(127);
    }
    close(in);
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
        int st = 0;
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid) {
            if (WIFEXITED(st)) res.status = WEXITSTATUS(st);
            res.started = res.status != 127;
            break;
        }
        if (r < 0 && errno != EINTR) {  // ECHILD: SIGCHLD is ignored, the child was reaped
            res.started = true;
            break;
        }
        if (Clock::now() >= deadline) {
            kill(-pid, SIGKILL);
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            res.started = true;
            res.timed_out = true;
            break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    char buf[4096];
    lseek(out, 0, SEEK_SET);
    for (;;) {
        ssize_t n = read(out, buf, sizeof buf);
        if (n <= 0 || res.output.size() >= 65536) break;
        res.output.append(buf, size_t(n));
    }
    close(out);
    return res;
}

/// The first non-empty line of s, trimmed, or "".
std::string first_line(const std::string& s) {
    size_t b = 0;
    while (b < s.size()) {
        size_t e = s.find('\n', b);
        if (e == std::string::npos) e = s.size();
        std::string l = s.substr(b, e - b);
        while (!l.empty() && (l.back() == '\r' || l.back() == ' ' || l.back() == '\t')) l.pop_back();
        size_t f = l.find_first_not_of(" \t");
        if (f != std::string::npos) return l.substr(f);
        b = e + 1;
    }
    return "";
}

/// Without the control program: whether something accepts connections on the control socket
/// (or, for the named pipe of older drivers, that it exists).
bool control_answers(const std::string& ctl, const struct stat& st) {
    if (S_ISFIFO(st.st_mode)) return true;
    if (!S_ISSOCK(st.st_mode)) return false;
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    if (ctl.size() >= sizeof a.sun_path) return false;
    std::memcpy(a.sun_path, ctl.c_str(), ctl.size() + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return false;
    bool ok = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    close(fd);
    return ok;
}

/// True when this process has loaded the CUDA driver library (so CUDA was initialized, or
/// is being initialized, before the daemon it may just have started).
bool cuda_driver_loaded() {
    std::ifstream maps("/proc/self/maps");
    std::string line;
    while (std::getline(maps, line))
        if (line.find("/libcuda.so") != std::string::npos) return true;
    return false;
}

/// running(), polled until `want` or timeout_ms.
bool wait_for(bool want, int timeout_ms) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
        if (running() == want) return true;
        if (Clock::now() >= deadline) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
}

}  // namespace

std::string pipe_directory() {
    const char* d = std::getenv("CUDA_MPS_PIPE_DIRECTORY");
    return d && *d ? d : "/tmp/nvidia-mps";
}

bool running() {
    const std::string ctl = control_path();
    struct stat st;
    if (stat(ctl.c_str(), &st) != 0) return false;
    const std::string prog = find_program();
    if (prog.empty()) return control_answers(ctl, st);
    RunResult r = run(prog, {}, "get_server_list\n", kProbeTimeoutMs);
    if (!r.started || r.timed_out) return false;
    // The client says "Cannot find MPS control daemon process" when nothing answers on the
    // pipe (and exits non-zero); the status is unknown only when SIGCHLD is ignored.
    return (r.status == 0 || r.status == -1) && r.output.find("Cannot find") == std::string::npos;
}

std::string ensure(bool start_if_missing) {
    if (running()) return "";
    const std::string ctl = control_path();
    if (!start_if_missing)
        return std::string("the CUDA MPS control daemon is not running (nothing answers on ") + ctl +
               "): " + kWhy + "; " + kHow;
    const std::string prog = find_program();
    if (prog.empty())
        return std::string("the CUDA MPS control daemon is not running and ") + kProgram +
               " is not in PATH (it comes with the NVIDIA driver's utilities): " + kWhy + "; " + kHow;
    RunResult r = run(prog, {"-d"}, "", kStartTimeoutMs);
    const bool start_ok = r.started && !r.timed_out && r.status == 0;
    // A failed start may have lost a race with another process starting the daemon.
    if (wait_for(true, start_ok ? kUpTimeoutMs : kFailedUpTimeoutMs)) {
        if (cuda_driver_loaded())
            return std::string(
                       "started the CUDA MPS control daemon, but this process had already loaded the CUDA "
                       "driver, so it is not an MPS client (call gv::mps::ensure before the first CUDA "
                       "call): ") +
                   kWhy;
        return "";
    }
    std::string what = "`" + prog + " -d` ";
    if (!r.started) what += "could not be run";
    else if (r.timed_out) what += "did not return within " + std::to_string(kStartTimeoutMs / 1000) + " s";
    else if (r.status != 0) what += "exited with status " + std::to_string(r.status);
    else
        what += "returned, but nothing answers on " + ctl + " after " + std::to_string(kUpTimeoutMs / 1000) +
                " s";
    std::string said = first_line(r.output);
    if (!said.empty()) what += " (" + said + ")";
    return "could not start the CUDA MPS control daemon: " + what + ": " + kWhy + "; " + kHow;
}

void stop() {
    if (!running()) return;
    const std::string prog = find_program();
    if (prog.empty()) return;
    run(prog, {}, "quit\n", kUpTimeoutMs);
    wait_for(false, kUpTimeoutMs);
}

}  // namespace gv::mps
