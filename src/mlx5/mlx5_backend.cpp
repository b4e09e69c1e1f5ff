// The ConnectX backend's host objects over a NIC (nic.hpp): the handles kernels drive (the
// rings where the NIC reads and writes them, the posting counters, the doorbell register
// mapped for the GPU or the CPU proxy's shadow record), the CQ registry, the read-consistency
// flush QP, and the choices (queue memory, doorbell handler, read flush) made once per context
// from the NIC's capabilities (decide.hpp).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <set>
#include <vector>

#include "core/backend.hpp"
#include "core/cq_clean.hpp"
#include "cuda/cuda_rt.hpp"
#include "gpuverbs/device/completion_queue_device.cuh"
#include "gpuverbs/mlx5/cqe.cuh"
#include "mlx5/cpu_proxy.hpp"
#include "mlx5/memory.hpp"
#include "mlx5/nic.hpp"

namespace gv::detail::mlx5be {

QpLayout qp_layout(const QpOptions& o) {
    GV_REQUIRE(o.max_send_sge >= 1 && o.max_send_sge <= kMaxSge,
               "max_send_sge " + std::to_string(o.max_send_sge) + " out of range: expected 1 .. " + std::to_string(kMaxSge));
    GV_REQUIRE(o.max_recv_sge >= 1 && o.max_recv_sge <= kMaxSge,
               "max_recv_sge " + std::to_string(o.max_recv_sge) + " out of range: expected 1 .. " + std::to_string(kMaxSge));
    GV_REQUIRE(o.max_inline <= kMaxInline, "max_inline " + std::to_string(o.max_inline) +
                                               " too large: a ConnectX WQE carries at most " +
                                               std::to_string(kMaxInline) + " inline bytes");
    GV_REQUIRE(o.sq_depth >= 1, "sq_depth 0: expected at least 1 WQE");
    GV_REQUIRE(o.rq_depth >= 1, "rq_depth 0: expected at least 1 receive WQE");
    QpLayout l;
    const uint32_t ds = std::max<uint32_t>({2 + o.max_send_sge, 4, 2 + mlx5::inline_ds(o.max_inline)});
    const uint64_t bbs = uint64_t(o.sq_depth) * mlx5::ds_to_bbs(ds);
    GV_REQUIRE(bbs <= 32768, "send queue too large: " + std::to_string(o.sq_depth) + " WQEs of " +
                                 std::to_string(mlx5::ds_to_bbs(ds)) +
                                 " WQEBBs exceed the 32768 WQEBBs of an mlx5 ring (qpc.log_sq_size <= 15)");
    GV_REQUIRE(o.rq_depth <= 32768, "rq_depth " + std::to_string(o.rq_depth) + " exceeds 32768 (qpc.log_rq_size <= 15)");
    l.sq_bbs = std::max<uint32_t>(next_pow2(bbs), 4);
    l.rq_stride = std::max<uint32_t>(16, next_pow2(uint64_t(o.max_recv_sge) * 16));
    l.rq_cnt = next_pow2(o.rq_depth);
    // The send ring follows the receive ring in the work queue buffer: keep it 64-byte aligned.
    while (uint64_t(l.rq_cnt) * l.rq_stride < 64) l.rq_cnt *= 2;
    l.rq_bytes = size_t(l.rq_cnt) * l.rq_stride;
    l.sq_bytes = size_t(l.sq_bbs) * 64;
    return l;
}

namespace {

/// Prints a sentence once per process (per key): the doorbell fallback is said once, clearly,
/// however many contexts open.
void say_once(const std::string& key, const std::string& text) {
    static std::mutex mu;
    static std::set<std::string> said;
    std::lock_guard<std::mutex> lock(mu);
    if (!said.insert(key).second) return;
    std::fprintf(stderr, "gpuverbs: %s\n", text.c_str());
}

class Mlx5Backend;

// ---------------------------------------------------------------------------------------
class Mlx5Cq final : public CqBackend {
public:
    static constexpr uint32_t kSlots = 1024;  // QPs per CQ
    static constexpr size_t kSlotsOff = 64;

    Mlx5Cq(int gpu, HostMapper& mapper, std::unique_ptr<NicCq> nic) : gpu_(gpu), mapper_(mapper), nic_(std::move(nic)) {
        const CqRing& r = nic_->ring();
        place_ = r.place;
        ring_bytes_ = (size_t(1) << r.log_cnt) * 64;
        try {
            if (place_ == Place::Host) {
                cqes_ = static_cast<mlx5_cqe64*>(mapper_.map(r.cqes, ring_bytes_, false));
                dbrec_ = static_cast<uint32_t*>(mapper_.map(r.dbrec, 8, false));
            } else {
                cqes_ = r.cqes;
                dbrec_ = r.dbrec;
            }
            extras_ = alloc_block(gpu_, place_, kSlotsOff + kSlots * sizeof(dev::CqQpSlot), 64, 0);
        } catch (...) {
            release();
            throw;
        }
        slots_.assign(kSlots, dev::CqQpSlot{});
    }
    ~Mlx5Cq() override { release(); }

    dev::CqHandle handle() const override {
        dev::CqHandle h{};
        h.cqes = cqes_;
        h.dbrec = dbrec_;
        h.ci = extras_.at<unsigned long long>(0);
        h.slots = extras_.at<dev::CqQpSlot>(kSlotsOff);
        h.overrun = nullptr;  // a ConnectX reports an overrun as a CQ error event, not in memory
        h.log_cnt = nic_->ring().log_cnt;
        h.slot_mask = kSlots - 1;
        h.sys = 1;  // the NIC writes the ring
        h.cqn = nic_->ring().cqn;
        h.host_reachable = place_ == Place::Host ? 1 : 0;
        return h;
    }
    uint32_t depth() const override { return 1u << nic_->ring().log_cnt; }
    MemoryKind memory() const override { return place_ == Place::Gpu ? MemoryKind::Device : MemoryKind::Host; }
    bool host_pollable() const override { return place_ == Place::Host; }
    Place place() const { return place_; }
    NicCq* nic() const { return nic_.get(); }

    void attach_slots(const dev::QpHandle& qp, bool send, bool recv) override {
        std::lock_guard<std::mutex> lock(mu_);
        const uint32_t qpn = qp.q.qpn;
        for (uint32_t i = 0; i < kSlots; ++i) {
            const uint32_t idx = (qpn + i) & (kSlots - 1);
            dev::CqQpSlot& s = slots_[idx];
            if (s.qpn != 0 && s.qpn != 0xffffffffu && s.qpn != qpn) continue;
            s.qpn = qpn;
            s.sq_log_bb = qp.q.sq_log_bb;
            s.sq = qp.q.sq;
            if (send) s.sq_retired = &qp.q.ctr->sq_retired;
            if (recv) s.rq_retired = &qp.q.ctr->rq_retired;
            // The NIC keeps no error syndrome a host can read: the poller of the QP's first
            // error completion keeps it beside the QP's counters (Mlx5Qp::error_syndrome).
            s.syndrome = reinterpret_cast<uint32_t*>(qp.mlx5.db_lock) + 2;
            write_block(extras_, kSlotsOff + idx * sizeof s, &s, sizeof s);
            return;
        }
        throw InvalidUsage("CQ " + std::to_string(nic_->ring().cqn) + " already serves " + std::to_string(kSlots) +
                           " QPs, its maximum");
    }
    void detach_slots(uint32_t qpn) override {
        std::lock_guard<std::mutex> lock(mu_);
        for (uint32_t i = 0; i < kSlots; ++i) {
            const uint32_t idx = (qpn + i) & (kSlots - 1);
            dev::CqQpSlot& s = slots_[idx];
            if (s.qpn == 0) return;
            if (s.qpn != qpn) continue;
            s = dev::CqQpSlot{};
            s.qpn = 0xffffffffu;  // tombstone: probing continues past it
            write_block(extras_, kSlotsOff + idx * sizeof s, &s, sizeof s);
            return;
        }
    }

    /// Removes the unpolled completions of qpn (the QP is reset or destroyed), as libmlx5's
    /// mlx5_cq_clean does: polled later, they would retire slots of the QP's emptied queues.
    /// Later entries move towards the producer over the gap; the consumer index passes it.
    /// Entries the NIC has not written yet are not touched. No thread may poll this CQ
    /// meanwhile.
    void clean(uint32_t qpn) {
        std::lock_guard<std::mutex> lock(mu_);
        const uint32_t log = nic_->ring().log_cnt;
        unsigned long long ci = 0;
        read_block(extras_, 0, &ci, sizeof ci);
        std::vector<mlx5_cqe64> ring(size_t(1) << log);
        read_ring(ring.data());
        const uint32_t freed = clean_cq_ring(ring.data(), log, ci, qpn, false,
                                             [&](size_t idx, const mlx5_cqe64& e) { write_ring(idx, e); });
        if (!freed) return;
        const unsigned long long nci = ci + freed;
        write_block(extras_, 0, &nci, sizeof nci);
        const uint32_t be_ci = mlx5::to_be32(uint32_t(nci) & 0xffffff);
        write_ring_dbrec(be_ci);
    }

private:
    void read_ring(mlx5_cqe64* dst) const {
        if (place_ == Place::Gpu) cuda::copy_from_device(dst, nic_->ring().cqes, ring_bytes_);
        else std::memcpy(dst, nic_->ring().cqes, ring_bytes_);
    }
    void write_ring(size_t idx, const mlx5_cqe64& e) {
        if (place_ == Place::Gpu) cuda::copy_to_device(nic_->ring().cqes + idx, &e, sizeof e);
        else std::memcpy(nic_->ring().cqes + idx, &e, sizeof e);
    }
    void write_ring_dbrec(uint32_t v) {
        if (place_ == Place::Gpu) cuda::copy_to_device(nic_->ring().dbrec + mlx5::kCqSetCi, &v, sizeof v);
        else __atomic_store_n(nic_->ring().dbrec + mlx5::kCqSetCi, v, __ATOMIC_RELEASE);
    }
    void release() noexcept {
        if (place_ == Place::Host && nic_) {
            if (cqes_) mapper_.unmap(nic_->ring().cqes, ring_bytes_);
            if (dbrec_) mapper_.unmap(nic_->ring().dbrec, 8);
        }
        free_block(extras_);
        cqes_ = nullptr;
        dbrec_ = nullptr;
    }

    int gpu_;
    HostMapper& mapper_;
    std::unique_ptr<NicCq> nic_;
    Place place_ = Place::Host;
    size_t ring_bytes_ = 0;
    mlx5_cqe64* cqes_ = nullptr;  // kernels' pointers
    uint32_t* dbrec_ = nullptr;
    Block extras_;  // the consumer counter, then the QP slot table
    std::mutex mu_;
    std::vector<dev::CqQpSlot> slots_;
};

// ---------------------------------------------------------------------------------------
// Layout of a QP's extras (queue memory, not read by the NIC): the posting counters, then the
// doorbell lock and the last producer index rung.
constexpr size_t kCtrOff = 0;
constexpr size_t kLockOff = sizeof(dev::QpCounters);
constexpr size_t kLastOff = kLockOff + 4;
constexpr size_t kSyndromeOff = kLockOff + 8;  // written by pollers (CqQpSlot::syndrome)
static_assert(kSyndromeOff == kLockOff + 2 * sizeof(uint32_t), "Mlx5Cq::attach_slots finds it at db_lock + 2");
constexpr size_t kExtrasBytes = 128;
static_assert(sizeof(dev::QpCounters) == 64, "counters fill one line");

class Mlx5Qp final : public QpBackend {
public:
    Mlx5Qp(int gpu, HostMapper& mapper, CpuProxy* proxy, const dev::Mlx5Flush* flush, DoorbellHandler handler,
           std::unique_ptr<NicQp> nic, Mlx5Cq* scq, Mlx5Cq* rcq)
        : gpu_(gpu), mapper_(mapper), proxy_(proxy), flush_(flush), handler_(handler), nic_(std::move(nic)),
          scq_(scq), rcq_(rcq) {
        try {
            build();
        } catch (...) {
            teardown();
            throw;
        }
    }
    ~Mlx5Qp() override { teardown(); }

    dev::QpHandle handle() const override {
        const QpRing& r = nic_->ring();
        dev::QpHandle h{};
        h.q.sq = sq_;
        h.q.rq = rq_;
        h.q.dbrec = shadow_.p ? shadow_.at<uint32_t>(0) : dbrec_;
        h.q.ctr = extras_.at<dev::QpCounters>(kCtrOff);
        h.q.qpn = r.qpn;
        h.q.sq_log_bb = r.sq_log_bb;
        h.q.rq_log_cnt = r.rq_log_cnt;
        h.q.rq_log_stride = r.rq_log_stride;
        h.q.max_inline = r.max_inline;
        h.q.max_send_sge = r.max_send_sge;
        h.q.max_recv_sge = r.max_recv_sge;
        h.q.sys = 1;  // a NIC (or the proxy thread) reads the queues
        h.q.host_reachable = r.place == Place::Host ? 1 : 0;
        h.scq = scq_->handle();
        h.rcq = rcq_->handle();
        h.backend = Backend::Mlx5;
        h.mlx5.uar = uar_;
        h.mlx5.uar_host = handler_ == DoorbellHandler::CpuProxy ? nullptr : r.uar;
        h.mlx5.db_lock = extras_.at<uint32_t>(kLockOff);
        h.mlx5.db_last = extras_.at<uint32_t>(kLastOff);
        h.mlx5.flush = flush_;
        return h;
    }

    QpState state() const override { return nic_->state(); }
    /// The syndrome of the QP's first failed completion (not a flush) that a poller took: a
    /// NIC keeps none a host can read, so this is what the completions said (0 until one
    /// was polled, and after a reset).
    uint8_t error_syndrome() const override {
        uint32_t v = 0;
        read_block(extras_, kSyndromeOff, &v, sizeof v);
        return uint8_t(v);
    }
    void to_init(const InitAttr& a) override { nic_->to_init(a); }
    void to_rtr(const RtrAttr& a) override { nic_->to_rtr(a); }
    void to_rts(const RtsAttr& a) override { nic_->to_rts(a); }
    void to_error() override { nic_->to_error(); }
    void reset() override {
        nic_->reset();
        const uint32_t qpn = nic_->ring().qpn;
        scq_->clean(qpn);
        if (rcq_ != scq_) rcq_->clean(qpn);
        // The queues start over: counters, doorbell record (and the proxy's copy), rings.
        if (proxy_id_) proxy_->remove(proxy_id_);
        proxy_id_ = 0;
        fill_block(extras_, 0, 0, kExtrasBytes);
        const QpRing& r = nic_->ring();
        zero(r.rq, size_t(1) << (r.rq_log_cnt + r.rq_log_stride), r.place);
        zero(r.sq, size_t(64) << r.sq_log_bb, r.place);
        zero(r.dbrec, 8, r.dbrec_place);
        if (shadow_.p) {
            fill_block(shadow_, 0, 0, 8);
            watch();
        }
    }
    QpEndpoint endpoint() const override { return nic_->endpoint(); }

private:
    void build() {
        const QpRing& r = nic_->ring();
        GV_REQUIRE(r.sq && r.rq && r.dbrec && r.uar, "the NIC returned a QP without rings or doorbell");
        // Kernels' pointers to the rings: GPU memory as it is; host memory mapped (the receive
        // and send rings share one buffer: mapped as one range).
        if (r.place == Place::Host) {
            const size_t rq_bytes = size_t(1) << (r.rq_log_cnt + r.rq_log_stride), sq_bytes = size_t(64) << r.sq_log_bb;
            uint8_t* lo = std::min(r.rq, r.sq);
            uint8_t* hi = std::max(r.rq + rq_bytes, r.sq + sq_bytes);
            wq_lo_ = lo;
            wq_bytes_ = size_t(hi - lo);
            uint8_t* k = static_cast<uint8_t*>(mapper_.map(lo, wq_bytes_, false));
            rq_ = k + (r.rq - lo);
            sq_ = k + (r.sq - lo);
        } else {
            rq_ = r.rq;
            sq_ = r.sq;
        }
        if (r.dbrec_place == Place::Host) {
            dbrec_ = static_cast<uint32_t*>(mapper_.map(r.dbrec, 8, false));
            dbrec_mapped_ = true;
        } else {
            dbrec_ = r.dbrec;
        }
        extras_ = alloc_block(gpu_, r.place, kExtrasBytes, 64, 0);
        if (handler_ == DoorbellHandler::CpuProxy) {
            GV_REQUIRE(proxy_ != nullptr, "CpuProxy handler without a proxy thread");
            GV_REQUIRE(r.dbrec_place == Place::Host,
                       "the NIC put the doorbell record of a CPU-proxy QP in GPU memory: the proxy thread "
                       "cannot write it");
            shadow_ = alloc_block(gpu_, Place::Host, 64, 64, 0);
            watch();
        } else if (gpu_ >= 0) {
            // The doorbell register mapped into the GPU (a device page: IoMemory).
            uar_ = static_cast<uint64_t*>(mapper_.map(r.uar, 8, r.uar_io));
        } else {
            uar_ = r.uar;  // a CPU-only context: CPU threads ring it (uar_host)
        }
    }
    void watch() {
        const QpRing& r = nic_->ring();
        CpuProxy::Qp q;
        q.shadow = shadow_.at<uint32_t>(0);
        q.dbrec = r.dbrec;
        q.uar = r.uar;
        q.qpn = r.qpn;
        proxy_id_ = proxy_->add(q);
    }
    void teardown() noexcept {
        if (proxy_id_ && proxy_) proxy_->remove(proxy_id_);
        proxy_id_ = 0;
        if (nic_) {
            nic_->stop();  // nothing of the NIC touches the rings below once it returns
            const QpRing& r = nic_->ring();
            if (uar_ && gpu_ >= 0 && handler_ != DoorbellHandler::CpuProxy) mapper_.unmap(r.uar, 8);
            if (dbrec_mapped_) mapper_.unmap(r.dbrec, 8);
            if (wq_lo_) mapper_.unmap(wq_lo_, wq_bytes_);
            // Unpolled completions of this QP must not be polled later (its slots go away).
            try {
                scq_->clean(r.qpn);
                if (rcq_ != scq_) rcq_->clean(r.qpn);
            } catch (...) {
            }
        }
        uar_ = nullptr;
        dbrec_mapped_ = false;
        wq_lo_ = nullptr;
        nic_.reset();  // destroys the NIC's QP before its memory goes
        free_block(shadow_);
        free_block(extras_);
    }
    static void zero(void* p, size_t n, Place place) {
        if (place == Place::Gpu) cuda::memset_device(p, 0, n);
        else std::memset(p, 0, n);
    }

    int gpu_;
    HostMapper& mapper_;
    CpuProxy* proxy_;
    const dev::Mlx5Flush* flush_;
    DoorbellHandler handler_;
    std::unique_ptr<NicQp> nic_;
    Mlx5Cq* scq_;
    Mlx5Cq* rcq_;
    uint8_t* sq_ = nullptr;  // kernels' pointers
    uint8_t* rq_ = nullptr;
    uint32_t* dbrec_ = nullptr;
    bool dbrec_mapped_ = false;
    uint8_t* wq_lo_ = nullptr;
    size_t wq_bytes_ = 0;
    uint64_t* uar_ = nullptr;
    Block extras_;
    Block shadow_;  // CpuProxy: the record kernels write, which the proxy copies to the NIC's
    uint64_t proxy_id_ = 0;
};

// ---------------------------------------------------------------------------------------
class Mlx5Backend final : public BackendOps {
public:
    Mlx5Backend(std::unique_ptr<Nic> nic, int gpu, const Mlx5Options& o)
        : nic_(std::move(nic)), gpu_(gpu), opts_(o), mapper_(gpu) {
        caps_ = nic_->capabilities(gpu);
        handler_ = choose_handler(o.doorbell, caps_);  // throws when Gpu is asked for and impossible
        queues_ = choose_queues(MemoryKind::Default, caps_);
        flush_choice_ = choose_read_flush(o.read_flush, caps_);
        if (!handler_.fallback.empty())
            say_once("mlx5-doorbell:" + nic_->name() + ":" + std::to_string(gpu), nic_->name() + ": " + handler_.fallback);
        if (handler_.handler == DoorbellHandler::CpuProxy) proxy_ = std::make_unique<CpuProxy>(nic_->name());
    }
    ~Mlx5Backend() override {
        // The flush QP and its CQ before the memory and PD they use.
        if (flush_cq_ && flush_qp_) flush_cq_->detach(flush_qp_.get());
        flush_qp_.reset();
        flush_cq_.reset();
        free_block(flush_block_);
        free_block(flush_words_);
        if (flush_src_mr_.lkey || flush_src_mr_.rkey) nic_->mr_deregister(flush_src_mr_);
        if (flush_dst_mr_.lkey || flush_dst_mr_.rkey) nic_->mr_deregister(flush_dst_mr_);
        free_block(flush_src_);
        if (flush_pd_) nic_->pd_free(flush_pd_);
        proxy_.reset();
    }

    Backend kind() const override { return Backend::Mlx5; }
    std::string name() const override { return nic_->name(); }
    int gpu() const override { return gpu_; }
    uint32_t pd_alloc() override { return nic_->pd_alloc(); }
    void pd_free(uint32_t pd) override { nic_->pd_free(pd); }
    MrInfo mr_register(uint32_t pd, void* addr, size_t length, uint32_t access) override {
        return nic_->mr_register(pd, addr, length, access);
    }
    void mr_deregister(const MrInfo& mr) override { nic_->mr_deregister(mr); }

    std::unique_ptr<CqBackend> cq_create(const CqOptions& o) override {
        GV_REQUIRE(o.depth >= 1 && o.depth <= (1u << 22),
                   "CQ depth " + std::to_string(o.depth) + " out of range: expected 1 .. 4194304");
        const Place place = choose_queues(o.memory, caps_).place;
        const uint32_t cnt = std::max<uint32_t>(2, next_pow2(o.depth));
        return std::make_unique<Mlx5Cq>(gpu_, mapper_, nic_->create_cq(cnt, place));
    }

    std::unique_ptr<QpBackend> qp_create(uint32_t pd, const QpOptions& o, CqBackend* scq, CqBackend* rcq) override {
        auto* s = dynamic_cast<Mlx5Cq*>(scq);
        auto* r = dynamic_cast<Mlx5Cq*>(rcq);
        GV_REQUIRE(s && r, "the QP's CQs belong to another backend");
        ensure_flush();
        return make_qp(pd, o, s, r, flush_ptr_);
    }

    std::string details() const override {
        std::string s = "queues: " + queues_.reason + "; doorbell: " + doorbell_handler_name(handler_.handler) + " (" +
                        handler_.reason + "); read flush: " + (flush_choice_.needed ? "yes" : "no") + " (" +
                        flush_choice_.reason + ")";
        const std::string note = nic_->note();
        if (!note.empty()) s += "; " + note;
        return s;
    }
    DoorbellHandler handler() const { return handler_.handler; }
    const Capabilities& capabilities() const { return caps_; }

private:
    std::unique_ptr<Mlx5Qp> make_qp(uint32_t pd, const QpOptions& o, Mlx5Cq* s, Mlx5Cq* r, const dev::Mlx5Flush* flush) {
        const Place place = choose_queues(o.memory, caps_).place;
        const QpLayout l = qp_layout(o);
        QpRequest q;
        q.pd = pd;
        q.place = place;
        q.dbrec_host = handler_.handler == DoorbellHandler::CpuProxy;
        q.sq_bbs = l.sq_bbs;
        q.rq_cnt = l.rq_cnt;
        q.rq_stride = l.rq_stride;
        q.sq_depth = o.sq_depth;
        q.rq_depth = o.rq_depth;
        q.max_send_sge = o.max_send_sge;
        q.max_recv_sge = o.max_recv_sge;
        q.max_inline = o.max_inline;
        q.scq = s->nic();
        q.rcq = r->nic();
        return std::make_unique<Mlx5Qp>(gpu_, mapper_, proxy_.get(), flush, handler_.handler, nic_->create_qp(q), s, r);
    }

    /// The context's flush QP, made when the first QP is (it needs a protection domain and
    /// the decisions): a loopback RC QP, a GPU word it reads, 8 bytes the READ lands in, and
    /// the Mlx5Flush kernels find through every QP handle.
    void ensure_flush() {
        std::lock_guard<std::mutex> lock(flush_mu_);
        if (!flush_choice_.needed || flush_ptr_) return;
        flush_pd_ = nic_->pd_alloc();
        CqOptions co;
        co.depth = 256;
        flush_cq_.reset(static_cast<Mlx5Cq*>(cq_create(co).release()));
        QpOptions qo;
        qo.send_cq = nullptr;
        qo.recv_cq = nullptr;
        qo.sq_depth = 128;
        qo.rq_depth = 1;
        qo.max_inline = 0;
        flush_qp_ = make_qp(flush_pd_, qo, flush_cq_.get(), flush_cq_.get(), nullptr);
        flush_cq_->attach(flush_qp_.get(), true, true);
        // Connected to itself.
        QpEndpoint me = flush_qp_->endpoint();
        InitAttr ia;
        ia.access = kRemoteRead;
        ia.port = opts_.port;
        flush_qp_->to_init(ia);
        RtrAttr ra;
        ra.remote_qpn = me.qpn;
        ra.rq_psn = me.psn;
        ra.path_mtu = std::min<uint32_t>(4096, me.mtu);
        ra.dlid = me.lid;
        ra.dgid = me.gid;
        ra.remote_extra = me.extra;
        flush_qp_->to_rtr(ra);
        RtsAttr ts;
        ts.sq_psn = me.psn;
        flush_qp_->to_rts(ts);
        // The word the READ reads: GPU memory on a GPU context (the memory whose writes it
        // pushes), host memory on a CPU-only one.
        flush_src_ = alloc_block(gpu_, gpu_ >= 0 ? Place::Gpu : Place::Host, 64, 64, 0);
        flush_src_mr_ = nic_->mr_register(flush_pd_, flush_src_.p, 64, kLocalWrite | kRemoteRead);
        flush_words_ = alloc_block(gpu_, Place::Host, 64, 64, 0);  // [0..8) READ target, [8..12) failed
        flush_dst_mr_ = nic_->mr_register(flush_pd_, flush_words_.p, 8, kLocalWrite);
        dev::Mlx5Flush f{};
        f.qp = flush_qp_->handle();
        f.src = reinterpret_cast<uint64_t>(flush_src_.p);
        f.src_rkey = flush_src_mr_.rkey;
        f.dst = reinterpret_cast<uint64_t>(flush_words_.p);
        f.dst_lkey = flush_dst_mr_.lkey;
        f.failed = flush_words_.at<uint32_t>(8);
        // Pinned host memory: kernels read it mapped, CPU threads directly.
        flush_block_ = alloc_block(gpu_, Place::Host, sizeof(dev::Mlx5Flush), 64, 0);
        std::memcpy(flush_block_.p, &f, sizeof f);
        flush_ptr_ = flush_block_.at<dev::Mlx5Flush>(0);
    }

    std::unique_ptr<Nic> nic_;
    int gpu_;
    Mlx5Options opts_;
    HostMapper mapper_;
    Capabilities caps_;
    HandlerChoice handler_;
    QueueChoice queues_;
    FlushChoice flush_choice_;
    std::unique_ptr<CpuProxy> proxy_;

    std::mutex flush_mu_;
    uint32_t flush_pd_ = 0;
    std::unique_ptr<Mlx5Cq> flush_cq_;
    std::unique_ptr<Mlx5Qp> flush_qp_;
    Block flush_src_, flush_words_, flush_block_;
    MrInfo flush_src_mr_, flush_dst_mr_;
    const dev::Mlx5Flush* flush_ptr_ = nullptr;
};

}  // namespace

std::unique_ptr<BackendOps> open_on(std::unique_ptr<Nic> nic, int gpu, const Mlx5Options& options) {
    return std::make_unique<Mlx5Backend>(std::move(nic), gpu, options);
}

std::string describe(const BackendOps& ops) { return ops.details(); }

}  // namespace gv::detail::mlx5be
