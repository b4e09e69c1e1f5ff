// The CPU-proxy doorbell (DoorbellHandler::CpuProxy): one thread per context watches the
// producer indexes kernels publish for each QP in pinned host memory (a shadow of the QP's
// doorbell record, written by dev::commit and dev::post_recv exactly as they write a real
// one) and, when one moved, writes the NIC's doorbell record and, for the send queue, the
// 8-byte doorbell register. For hosts where the GPU cannot map the NIC's UAR page.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace gv::detail::mlx5be {

class CpuProxy {
public:
    /// One QP the proxy rings: host pointers, all in this process.
    struct Qp {
        const uint32_t* shadow = nullptr;  ///< [MLX5_RCV_DBR], [MLX5_SND_DBR]: what kernels publish
        uint32_t* dbrec = nullptr;         ///< the NIC's doorbell record (host memory)
        uint64_t* uar = nullptr;           ///< the doorbell register (its CPU mapping)
        uint32_t qpn = 0;
    };

    /// max_idle_sleep_us: longest sleep of the thread when no index moved for a while (it
    /// spins first, then sleeps 1, 2, 4 ... us up to this); 0: never sleeps.
    explicit CpuProxy(std::string name, uint32_t max_idle_sleep_us = 50);
    ~CpuProxy();
    CpuProxy(const CpuProxy&) = delete;
    CpuProxy& operator=(const CpuProxy&) = delete;

    /// Starts watching a QP (its shadow and record start equal: zero after creation or reset).
    uint64_t add(const Qp& qp);
    /// Stops watching it; when this returns the thread no longer touches its memory.
    void remove(uint64_t id);
    /// Doorbells written so far (tests, statistics).
    uint64_t doorbells() const { return doorbells_.load(std::memory_order_relaxed); }

    /// One pass over a QP: copies a moved receive index to the record; for a moved send index,
    /// writes the record, then the doorbell. Returns true when it wrote anything. (The thread's
    /// loop body, and what the tests call directly.)
    static bool service(const Qp& q, uint32_t* last_rq, uint32_t* last_sq);

private:
    struct Entry {
        uint64_t id;
        Qp qp;
        uint32_t last_rq = 0, last_sq = 0;
    };
    void run();

    std::string name_;
    uint32_t max_idle_sleep_us_;
    std::mutex mu_;
    std::vector<Entry> qps_;
    uint64_t next_id_ = 1;
    std::atomic<bool> stop_{false};
    std::atomic<uint64_t> doorbells_{0};
    std::thread thread_;
};

}  // namespace gv::detail::mlx5be
