#include "soft/peer_watch.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "gpuverbs/errors.hpp"

namespace gv::detail {

PeerWatch& PeerWatch::instance() {
    static std::mutex mu;
    static PeerWatch* w = nullptr;
    std::lock_guard<std::mutex> lock(mu);
    // A child of fork() inherits the parent's object but not its thread: it gets its own
    // (the inherited one is left alone; it cannot be joined here).
    if (!w || w->owner_ != uint32_t(getpid())) w = new PeerWatch();  // lives for the process
    return *w;
}

PeerWatch::PeerWatch() : owner_(uint32_t(getpid())) {
    event_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (event_fd_ < 0) throw SystemError("eventfd for the peer-process watcher", errno);
    thread_ = std::thread([this] { loop(); });
}

PeerWatch::~PeerWatch() {
    {
        std::lock_guard<std::mutex> lock(mu_);
        stop_ = true;
    }
    wake();
    if (thread_.joinable()) thread_.join();
    for (auto& [pid, fd] : pidfds_) ::close(fd);
    ::close(event_fd_);
}

void PeerWatch::wake() {
    uint64_t one = 1;
    ssize_t n = ::write(event_fd_, &one, sizeof one);
    (void)n;  // EAGAIN: a wake-up is pending already
}

uint64_t PeerWatch::watch(uint32_t pid, std::function<void()> fn) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!pidfds_.count(pid)) {
        int fd = int(syscall(SYS_pidfd_open, pid_t(pid), 0));
        if (fd < 0) {
            int err = errno;
            if (err == ESRCH) {  // already gone
                lock.unlock();
                fn();
                return 0;
            }
            throw SystemError("cannot watch peer process " + std::to_string(pid) + " (pidfd_open)", err);
        }
        pidfds_[pid] = fd;
    }
    uint64_t id = next_id_++;
    entries_[id] = Entry{pid, std::move(fn)};
    lock.unlock();
    wake();
    return id;
}

void PeerWatch::cancel(uint64_t id) {
    if (id == 0) return;
    std::lock_guard<std::mutex> lock(mu_);  // waits for a callback that is running
    entries_.erase(id);
}

void PeerWatch::loop() {
    std::vector<pollfd> fds;
    std::vector<uint32_t> pids;
    for (;;) {
        {
            std::lock_guard<std::mutex> lock(mu_);
            if (stop_) return;
            fds.assign(1, pollfd{event_fd_, POLLIN, 0});
            pids.assign(1, 0);
            for (auto& [pid, fd] : pidfds_) {
                fds.push_back(pollfd{fd, POLLIN, 0});
                pids.push_back(pid);
            }
        }
        int n = ::poll(fds.data(), fds.size(), -1);
        if (n < 0) continue;  // EINTR
        if (fds[0].revents) {
            uint64_t v;
            while (::read(event_fd_, &v, sizeof v) > 0) {
            }
        }
        for (size_t i = 1; i < fds.size(); ++i) {
            if (!fds[i].revents) continue;
            // The process exited: run its callbacks once and forget it.
            std::lock_guard<std::mutex> lock(mu_);
            uint32_t pid = pids[i];
            for (auto it = entries_.begin(); it != entries_.end();) {
                if (it->second.pid != pid) {
                    ++it;
                    continue;
                }
                auto fn = std::move(it->second.fn);
                it = entries_.erase(it);
                try {
                    fn();
                } catch (...) {
                    // Nothing to report to: the QP stays as it was (a host call on it will
                    // surface the same failure).
                }
            }
            auto f = pidfds_.find(pid);
            if (f != pidfds_.end()) {
                ::close(f->second);
                pidfds_.erase(f);
            }
        }
    }
}

}  // namespace gv::detail
