// The CPU-proxy doorbell's one step (src/mlx5/cpu_proxy.hpp) on plain memory: what it writes
// into the NIC's doorbell record and doorbell register for each move of the shadow record, and
// the thread watching several QPs.
#include <gtest/gtest.h>

#include <infiniband/mlx5dv.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "gpuverbs/detail/mlx5/doorbell.cuh"
#include "mlx5/cpu_proxy.hpp"

using gv::detail::mlx5be::CpuProxy;
namespace mlx5db = gv::detail::mlx5db;
using gv::mlx5::to_be32;

TEST(Mlx5CpuProxy, CopiesTheRecordsAndRingsForTheSendQueueOnly) {
    uint32_t shadow[2] = {0, 0}, dbrec[2] = {0, 0};
    uint64_t uar = 0;
    CpuProxy::Qp q{shadow, dbrec, &uar, 0x1234};
    uint32_t lrq = 0, lsq = 0;
    EXPECT_FALSE(CpuProxy::service(q, &lrq, &lsq));  // nothing moved
    // A receive: its record is copied, no doorbell (receives have none).
    shadow[MLX5_RCV_DBR] = to_be32(3);
    EXPECT_TRUE(CpuProxy::service(q, &lrq, &lsq));
    EXPECT_EQ(dbrec[MLX5_RCV_DBR], to_be32(3));
    EXPECT_EQ(dbrec[MLX5_SND_DBR], 0u);
    EXPECT_EQ(uar, 0u);
    // A send: the record, then the doorbell naming the index and the QP.
    shadow[MLX5_SND_DBR] = to_be32(5);
    EXPECT_TRUE(CpuProxy::service(q, &lrq, &lsq));
    EXPECT_EQ(dbrec[MLX5_SND_DBR], to_be32(5));
    EXPECT_EQ(uar, mlx5db::doorbell_value(5, 0x1234));
    uint8_t b[8];
    std::memcpy(b, &uar, 8);
    const uint8_t want[8] = {0x00, 0x00, 0x05, 0x00, 0x00, 0x12, 0x34, 0x00};
    EXPECT_EQ(std::memcmp(b, want, 8), 0);
    EXPECT_FALSE(CpuProxy::service(q, &lrq, &lsq));  // no second doorbell for the same index
    // Across the 16-bit wrap of the index.
    shadow[MLX5_SND_DBR] = to_be32(0xffff);
    EXPECT_TRUE(CpuProxy::service(q, &lrq, &lsq));
    shadow[MLX5_SND_DBR] = to_be32(0x10002 & 0xffff);
    EXPECT_TRUE(CpuProxy::service(q, &lrq, &lsq));
    EXPECT_EQ(uar, mlx5db::doorbell_value(2, 0x1234));
}

TEST(Mlx5CpuProxy, TheThreadWatchesEveryQpUntilRemoved) {
    struct Q {
        uint32_t shadow[2] = {0, 0}, dbrec[2] = {0, 0};
        uint64_t uar = 0;
    } qs[3];
    CpuProxy proxy("test", 10);
    uint64_t ids[3];
    for (int i = 0; i < 3; ++i) ids[i] = proxy.add({qs[i].shadow, qs[i].dbrec, &qs[i].uar, uint32_t(0x100 + i)});
    for (int i = 0; i < 3; ++i) __atomic_store_n(&qs[i].shadow[MLX5_SND_DBR], to_be32(uint32_t(10 + i)), __ATOMIC_RELEASE);
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    auto rung = [&](int i) {
        return __atomic_load_n(&qs[i].uar, __ATOMIC_ACQUIRE) == mlx5db::doorbell_value(uint32_t(10 + i), uint32_t(0x100 + i));
    };
    // The thread counts a pass's doorbells after the pass, so the count may lag the doorbells
    // a moment: wait for both.
    while (!(rung(0) && rung(1) && rung(2) && proxy.doorbells() >= 3u) && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(rung(i)) << i;
    EXPECT_GE(proxy.doorbells(), 3u);
    // Removed: no longer touched.
    proxy.remove(ids[1]);
    __atomic_store_n(&qs[1].shadow[MLX5_SND_DBR], to_be32(99), __ATOMIC_RELEASE);
    __atomic_store_n(&qs[0].shadow[MLX5_SND_DBR], to_be32(20), __ATOMIC_RELEASE);
    until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (__atomic_load_n(&qs[0].uar, __ATOMIC_ACQUIRE) != mlx5db::doorbell_value(20, 0x100) &&
           std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    EXPECT_EQ(qs[0].uar, mlx5db::doorbell_value(20, 0x100));
    EXPECT_EQ(qs[1].uar, mlx5db::doorbell_value(11, 0x101));
    EXPECT_EQ(qs[1].dbrec[MLX5_SND_DBR], to_be32(11));
}
