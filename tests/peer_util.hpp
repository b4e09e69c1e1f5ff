// Two-process test scaffolding: one side of a connection (context, protection domain, two
// CQs, one QP on a software device) and a barrier over the out-of-band channel.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <vector>

#include "gpuverbs/gpuverbs.hpp"
#include "gpuverbs/oob.hpp"

namespace gvtest {

/// One side: a software-device context on `gpu` (-1: CPU threads), a protection domain, two
/// CQs in the device's default memory and one QP.
struct Side {
    explicit Side(int gpu)
        : ctx(gv::ContextOptions{gv::Backend::Soft, gpu}), pd(ctx), scq(ctx), rcq(ctx), qp(pd, options()) {}
    gv::Context ctx;
    gv::ProtectionDomain pd;
    gv::CompletionQueue scq, rcq;
    gv::QueuePair qp;
    gv::dev::QpHandle h() const { return qp.device_handle(); }

private:
    gv::QpOptions options() {
        gv::QpOptions o;
        o.send_cq = &scq;
        o.recv_cq = &rcq;
        return o;
    }
};

/// Both sides call it after connect(): neither goes on before the other got as far.
inline void barrier(gv::oob::Channel& ch, uint8_t tag, int timeout_ms) {
    ch.send_message(std::vector<uint8_t>{tag}, timeout_ms);
    if (ch.recv_message(timeout_ms) != std::vector<uint8_t>{tag})
        throw std::runtime_error("barrier: unexpected message");
}

}  // namespace gvtest
