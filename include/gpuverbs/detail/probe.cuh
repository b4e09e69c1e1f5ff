// Time stamps inside the software device's executor and the CQ poll, for tools/gv_probe_path
// only: it defines GV_EXEC_PROBE and gv_exec_probe_stamp(int) before it includes the device
// API, and reads where the time of one WRITE goes inside `execute` and `poll`. In every other
// build GV_EXEC_STAMP is nothing, and in host code it is always nothing.
#pragma once

#if defined(GV_EXEC_PROBE) && defined(__CUDA_ARCH__)
#define GV_EXEC_STAMP(i) gv_exec_probe_stamp(int(i))
#else
#define GV_EXEC_STAMP(i) ((void)0)
#endif

namespace gv::detail {
/// The points stamped, in the order one signaled WRITE passes them.
enum ExecStamp : int {
    kStampEnter,        ///< progress() entered
    kStampLocked,       ///< the ring's atomic add on the lock word done (the QP is held)
    kStampPublished,    ///< next_published: the published count, QP state and configuration read
    kStampChecked,      ///< the WQE read and its header and body checked
    kStampLocal,        ///< the local side's memory regions resolved
    kStampRemote,       ///< the peer's memory region resolved, copies planned
    kStampReceive,      ///< a SEND's: the peer's receive taken (or peeked at) and its scatter planned
    kStampCopied,       ///< the bytes copied
    kStampFenced,       ///< the release fence after the copy
    kStampRespCqe,      ///< a SEND's: the peer's receive CQE written (slot, consumer index, CQE)
    kStampCqe,          ///< the requester's CQE written (slot, consumer index, CQE)
    kStampFinished,     ///< sq_ci advanced
    kStampDrained,      ///< drain() found nothing more
    kStampUnlocked,     ///< the QP given back (the lock word's CAS to 0)
    kStampRechecked,    ///< kept for the tool's columns: nothing is re-checked since the counting lock
    kStampPollEnter,    ///< poll_cq() entered
    kStampPollReady,    ///< the CQE at the consumer index found ready and decoded
    kStampPollClaimed,  ///< the consumer index claimed (CAS)
    kStampPollDbrec,    ///< the CQ's doorbell record advanced
    kStampPollRetired,  ///< the send queue's slots retired
    kStampCount
};
}  // namespace gv::detail
