// Watches peer processes on this host: when one exits (killed, crashed or done), the
// callbacks registered for it run, once, on the watch thread. The software device uses it
// to move every QP connected to a dead peer to ERROR, so outstanding work completes with
// flush errors instead of waiting for a peer that will never answer.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

namespace gv::detail {

class PeerWatch {
public:
    /// The process's watcher (a new one in a child of fork()).
    static PeerWatch& instance();

    PeerWatch();
    ~PeerWatch();
    PeerWatch(const PeerWatch&) = delete;
    PeerWatch& operator=(const PeerWatch&) = delete;

    /// Calls fn once when process pid exits (at once, on this thread, when it is already
    /// gone). Returns an id for cancel(). Throws SystemError when the process cannot be
    /// watched (pidfd_open failed for another reason than its absence).
    uint64_t watch(uint32_t pid, std::function<void()> fn);
    /// After cancel() returns, fn is not running and never runs. Unknown ids are ignored.
    void cancel(uint64_t id);

private:
    struct Entry {
        uint32_t pid;
        std::function<void()> fn;
    };
    void loop();
    void wake();

    uint32_t owner_;
    int event_fd_ = -1;
    std::mutex mu_;               // guards everything below; held while a callback runs
    std::map<uint64_t, Entry> entries_;
    std::map<uint32_t, int> pidfds_;  // pid -> its pidfd
    uint64_t next_id_ = 1;
    bool stop_ = false;
    std::thread thread_;
};

}  // namespace gv::detail
