// One step of a wait for another thread's progress, shared by every loop of the data path.
#pragma once

#include <sched.h>
#include <time.h>

#include "gpuverbs/device/atomic.cuh"

namespace gv::dev {

/// One step of a wait for another thread's progress (a poster between reserve and publish,
/// a poller freeing slots, an executor). CPU threads may outnumber cores, and the one
/// waited for may be preempted: spinning through whole time slices then lets only one
/// WQE through per slice (a convoy: every poster queues behind a preempted one), so after
/// a short spin (`limit` steps) a CPU thread gives its core away. sched_yield alone is not
/// enough when other busy threads share the cores: the scheduler may hand the core straight
/// back to another waiter, and the preempted thread waited for gets only its fair share of
/// a crowded run queue (ManyThreadsOneQp beside two busy loops on 2 cores took 14-27 s in
/// half the runs). So after `limit` yields a waiter sleeps (50 us), which leaves the cores
/// to the threads that can make progress. GPU threads only pause.
GV_HOST_DEVICE void spin_pause(uint32_t& spins, uint32_t limit = 64) {
#if GV_DEVICE_CODE
    (void)spins;
    (void)limit;
    atom::relax();
#else
    if (spins < limit) {
        ++spins;
        atom::relax();
    } else if (spins < limit + 4) {
        ++spins;
        sched_yield();
    } else {
        struct timespec ts{0, 50000};
        nanosleep(&ts, nullptr);
    }
#endif
}

}  // namespace gv::dev
