// Out-of-band record exchange: Channel::exchange, the hello, QP and memory records both ways
// (oob.hpp).
#include "gpuverbs/oob.hpp"
#include "oob/oob_channel.hpp"
#include "oob/oob_wire.hpp"

#include <poll.h>

#include <cstring>

namespace gv::oob {

using sock::append_frame;
using sock::Deadline;
using sock::FrameReader;
using sock::send_some;
using sock::wait_fd;
using wire::backend_code;

Exchanged Channel::exchange(Backend backend, const std::vector<QpEndpoint>& qps,
                            const std::vector<RemoteBuffer>& buffers, int timeout_ms) {
    GV_REQUIRE(impl_, "channel is not connected");
    impl_->check_usable();
    GV_REQUIRE(backend_code(backend) != 0,
               std::string("exchange needs a concrete backend, not ") + backend_name(backend));
    GV_REQUIRE(qps.size() <= kMaxExchangeRecords && buffers.size() <= kMaxExchangeRecords,
               "exchange carries at most " + std::to_string(kMaxExchangeRecords) + " QP and memory records");
    for (size_t i = 0; i < qps.size(); ++i)
        GV_REQUIRE(qps[i].backend == backend, "QP endpoint " + std::to_string(i) + " is of backend " +
                                                  backend_name(qps[i].backend) + ", the exchange of " +
                                                  backend_name(backend));
    const std::string& peer = impl_->peer;
    std::vector<uint8_t> out = impl_->unsent;  // the rest of our greeting, if any
    HelloRecord hello{backend, uint32_t(qps.size()), uint32_t(buffers.size())};
    append_frame(out, hello.serialize());
    for (const QpEndpoint& e : qps) append_frame(out, QpRecord(e).serialize());
    for (const RemoteBuffer& b : buffers) append_frame(out, MemoryRecord(b).serialize());

    Exchanged res;
    bool have_hello = false;
    HelloRecord theirs;
    size_t received = 0;  // records after the hello
    auto expected = [&] { return size_t(theirs.qp_count) + theirs.memory_count; };
    auto recv_done = [&] { return have_hello && received == expected(); };
    size_t sent = 0;
    auto state = [&] {
        std::string s =
            "sent " + std::to_string(sent) + " of " + std::to_string(out.size()) + " bytes, received ";
        if (!have_hello) return s + "no hello yet";
        return s + std::to_string(received) + " of " + std::to_string(expected()) + " records";
    };
    auto take_frame = [&](std::vector<uint8_t> m) {
        const std::string pre = "exchange with " + peer + ": ";
        try {
            if (!have_hello) {
                theirs = HelloRecord::parse(m.data(), m.size());
                have_hello = true;
                if (theirs.backend != backend)
                    throw RemoteError(pre + "peer uses backend " + backend_name(theirs.backend) +
                                      ", we use " + backend_name(backend));
                if (theirs.qp_count != qps.size())
                    throw RemoteError(pre + "peer offers " + std::to_string(theirs.qp_count) +
                                      " QP endpoints, we offer " + std::to_string(qps.size()) +
                                      " (QPs connect pairwise: both sides need the same number)");
                res.backend = theirs.backend;
                res.qps.reserve(theirs.qp_count);
                res.buffers.reserve(theirs.memory_count);
                return;
            }
            if (res.qps.size() < theirs.qp_count) {
                QpRecord r = QpRecord::parse(m.data(), m.size());
                if (r.endpoint.backend != theirs.backend)
                    throw RemoteError(pre + "peer's QP record " + std::to_string(res.qps.size()) +
                                      " is of backend " + backend_name(r.endpoint.backend) +
                                      ", its hello said " + backend_name(theirs.backend));
                res.qps.push_back(std::move(r.endpoint));
            } else {
                res.buffers.push_back(MemoryRecord::parse(m.data(), m.size()).buffer);
            }
            ++received;
        } catch (const RemoteError& e) {
            if (std::strncmp(e.what(), pre.c_str(), pre.size()) == 0) throw;
            std::string which =
                !have_hello ? std::string("hello")
                : res.qps.size() < theirs.qp_count
                    ? "QP record " + std::to_string(res.qps.size()) + " of " + std::to_string(theirs.qp_count)
                    : "memory record " + std::to_string(res.buffers.size()) + " of " +
                          std::to_string(theirs.memory_count);
            throw RemoteError(pre + "bad " + which + ": " + e.what());
        }
    };

    Deadline dl(timeout_ms);
    FrameReader& rd = impl_->reader;
    try {
        while (sent < out.size() || !recv_done()) {
            short ev = 0;
            if (!recv_done()) ev |= POLLIN;
            if (sent < out.size()) ev |= POLLOUT;
            short rev = wait_fd(impl_->fd, ev, dl);
            if (rev == 0)
                throw TimeoutError("exchange with " + peer + " timed out after " +
                                   std::to_string(timeout_ms) + " ms: " + state());
            try {
                if (sent < out.size() && (rev & (POLLOUT | POLLERR | POLLHUP)))
                    send_some(impl_->fd, out.data(), out.size(), sent, peer, "the exchange");
                if (!recv_done() && (rev & (POLLIN | POLLERR | POLLHUP)))
                    while (!recv_done() && rd.pump(impl_->fd, peer, impl_->max_message))
                        take_frame(rd.take());
            } catch (const RemoteError& e) {
                if (std::strncmp(e.what(), "exchange with ", 14) == 0) throw;
                throw RemoteError("exchange with " + peer + " failed (" + state() + "): " + e.what());
            }
        }
    } catch (const Error&) {
        impl_->mark_broken("an exchange failed");
        throw;
    }
    impl_->unsent.clear();
    return res;
}

}  // namespace gv::oob
