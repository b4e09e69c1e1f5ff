#include "mlx5/cpu_proxy.hpp"

#include <infiniband/mlx5dv.h>
#include <pthread.h>
#include <time.h>

#include "gpuverbs/detail/mlx5/doorbell.cuh"

namespace gv::detail::mlx5be {

CpuProxy::CpuProxy(std::string name, uint32_t max_idle_sleep_us)
    : name_(std::move(name)), max_idle_sleep_us_(max_idle_sleep_us) {
    thread_ = std::thread([this] { run(); });
    std::string tname = ("gv-db-" + name_).substr(0, 15);
    pthread_setname_np(thread_.native_handle(), tname.c_str());
}

CpuProxy::~CpuProxy() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
}

uint64_t CpuProxy::add(const Qp& qp) {
    std::lock_guard<std::mutex> lock(mu_);
    Entry e;
    e.id = next_id_++;
    e.qp = qp;
    // Whatever was published before the QP was handed over still counts.
    e.last_rq = 0;
    e.last_sq = 0;
    qps_.push_back(e);
    return e.id;
}

void CpuProxy::remove(uint64_t id) {
    std::lock_guard<std::mutex> lock(mu_);  // the loop holds it for a whole pass
    for (size_t i = 0; i < qps_.size(); ++i) {
        if (qps_[i].id == id) {
            qps_.erase(qps_.begin() + long(i));
            return;
        }
    }
}

bool CpuProxy::service(const Qp& q, uint32_t* last_rq, uint32_t* last_sq) {
    bool wrote = false;
    // The receive queue has no doorbell register: the record alone tells the NIC. Acquire the
    // shadow (a kernel released it after writing the receive WQE), then release the record:
    // the WQE bytes the kernel wrote are visible to whoever sees the record (the NIC reads the
    // record, then the WQE).
    const uint32_t rq = __atomic_load_n(&q.shadow[MLX5_RCV_DBR], __ATOMIC_ACQUIRE);
    if (rq != *last_rq) {
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
        __atomic_store_n(&q.dbrec[MLX5_RCV_DBR], rq, __ATOMIC_RELEASE);
        *last_rq = rq;
        wrote = true;
    }
    // The send queue: the record, then the doorbell register (write_doorbell fences before
    // and after the 8-byte store, as the GPU's own ring does).
    const uint32_t sq = __atomic_load_n(&q.shadow[MLX5_SND_DBR], __ATOMIC_ACQUIRE);
    if (sq != *last_sq) {
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
        __atomic_store_n(&q.dbrec[MLX5_SND_DBR], sq, __ATOMIC_RELEASE);
        const uint32_t pi = mlx5::from_be32(sq) & 0xffff;
        mlx5db::write_doorbell(q.uar, mlx5db::doorbell_value(pi, q.qpn));
        *last_sq = sq;
        wrote = true;
    }
    return wrote;
}

void CpuProxy::run() {
    uint32_t idle = 0, sleep_us = 1;
    while (!stop_.load(std::memory_order_relaxed)) {
        bool any = false;
        uint64_t rung = 0;
        {
            std::lock_guard<std::mutex> lock(mu_);
            for (Entry& e : qps_) {
                uint32_t before = e.last_sq;
                if (service(e.qp, &e.last_rq, &e.last_sq)) any = true;
                if (e.last_sq != before) ++rung;
            }
        }
        if (rung) doorbells_.fetch_add(rung, std::memory_order_relaxed);
        if (any) {
            idle = 0;
            sleep_us = 1;
            continue;
        }
        // Idle: spin a while (a kernel's next commit is often microseconds away), then sleep
        // with a growing period up to the bound.
        if (++idle < 2000 || max_idle_sleep_us_ == 0) {
            atom::relax();
            continue;
        }
        struct timespec ts{0, long(sleep_us) * 1000};
        nanosleep(&ts, nullptr);
        if (sleep_us < max_idle_sleep_us_) sleep_us = sleep_us * 2 > max_idle_sleep_us_ ? max_idle_sleep_us_ : sleep_us * 2;
    }
}

}  // namespace gv::detail::mlx5be
