// Out-of-band connection records: format, validation, fuzzing.
#include "oob_util.hpp"

using namespace gv;
using namespace gv::oob;

// =============================================================================================
// Records
// =============================================================================================

TEST(OobRecord, Crc32MatchesTheStandardCheckValue) {
    const char* s = "123456789";
    EXPECT_EQ(crc32(reinterpret_cast<const uint8_t*>(s), 9), 0xCBF43926u);
    EXPECT_EQ(crc32(nullptr, 0), 0u);
}

TEST(OobRecord, QpRecordBytesFollowTheDocumentedLayout) {
    QpEndpoint e;
    e.backend = Backend::Soft;
    e.lid = 0x1234;
    e.qpn = 0xabcdef;
    e.psn = 0x123456;
    e.mtu = 1024;
    for (int i = 0; i < 16; ++i) e.gid[i] = uint8_t(i);
    e.device = "soft-cpu";
    std::vector<uint8_t> b = QpRecord(e).serialize();
    EXPECT_EQ(b, raw_qp(QpFields{}));
    ASSERT_EQ(b.size(), 12u + 44u + 4u);
    // With a locator: pid, fd, arena base and size, QP context at payload offsets 36..67, the
    // device's GPU identity at 68..83 (zero: CPU threads).
    const gv::detail::soft::Locator l{4242, 17, 0x110000000000ull, 1ull << 30, 0x110000001040ull};
    e.extra = gv::detail::soft::encode(l);
    QpFields f;
    f.loc = true;
    f.pid = 4242, f.arena_fd = 17, f.arena_base = 0x110000000000ull, f.arena_size = 1ull << 30;
    f.qp_context = 0x110000001040ull;
    EXPECT_EQ(QpRecord(e).serialize(), raw_qp(f));
    EXPECT_TRUE(gv::detail::soft::decode(QpRecord::parse(raw_qp(f)).endpoint.extra) == l);
    EXPECT_EQ(std::string(b.begin(), b.begin() + 4), "GVQP");
}

TEST(OobRecord, MemoryAndHelloBytesFollowTheDocumentedLayout) {
    RemoteBuffer rb{0x1122334455667788ull, 4096, 0xcafef00d, kRemoteWrite | kRemoteRead};
    std::vector<uint8_t> b = MemoryRecord(rb).serialize();
    EXPECT_EQ(b, raw_memory(rb.addr, rb.length, rb.rkey, rb.access));
    EXPECT_EQ(b.size(), 12u + 24u + 4u);
    EXPECT_EQ(std::string(b.begin(), b.begin() + 4), "GVMR");
    HelloRecord h{Backend::Mlx5, 64, 4};
    EXPECT_EQ(h.serialize(), raw_hello(64, 4, 2));
}

TEST(OobRecord, RandomRecordsRoundTrip) {
    std::mt19937_64 r(42);
    for (int i = 0; i < 2000; ++i) {
        QpEndpoint e = random_endpoint(r);
        std::vector<uint8_t> b = QpRecord(e).serialize();
        QpRecord back = QpRecord::parse(b);
        ASSERT_TRUE(same(back.endpoint, e)) << "iteration " << i;
        EXPECT_EQ(QpRecord(back).serialize(), b);

        RemoteBuffer rb = random_buffer(r);
        std::vector<uint8_t> m = MemoryRecord(rb).serialize();
        ASSERT_TRUE(same(MemoryRecord::parse(m).buffer, rb)) << "iteration " << i;

        HelloRecord h{e.backend, uint32_t(r() % (kMaxExchangeRecords + 1)),
                      uint32_t(r() % (kMaxExchangeRecords + 1))};
        HelloRecord hb = HelloRecord::parse(h.serialize());
        ASSERT_TRUE(hb.backend == h.backend && hb.qp_count == h.qp_count &&
                    hb.memory_count == h.memory_count);
    }
    // Extremes of every field.
    QpEndpoint e;
    e.qpn = 0xFFFFFF, e.psn = 0xFFFFFF, e.lid = 0xFFFF, e.mtu = 256;
    e.gid.fill(0xFF);
    e.device = std::string(kMaxDeviceName, '~');
    EXPECT_TRUE(same(QpRecord::parse(QpRecord(e).serialize()).endpoint, e));
    e.device.clear();
    EXPECT_TRUE(same(QpRecord::parse(QpRecord(e).serialize()).endpoint, e));
    RemoteBuffer rb{~0ull - 9, 10, ~0u, kAllAccess};  // ends exactly at 2^64
    EXPECT_TRUE(same(MemoryRecord::parse(MemoryRecord(rb).serialize()).buffer, rb));
}

TEST(OobRecord, WrongMagic) {
    std::vector<uint8_t> b = raw_qp(QpFields{});
    b[0] ^= 0x01;
    EXPECT_MSG(parse_error<QpRecord>(b), "not a gpuverbs record: magic 0x50515646 expected 0x50515647");
    std::vector<uint8_t> m = raw_memory(0x1000, 64, 1, kRemoteRead);
    EXPECT_MSG(parse_error<QpRecord>(m), "got a memory record (magic 0x524d5647) expected 0x50515647");
    EXPECT_MSG(parse_error<MemoryRecord>(raw_qp(QpFields{})), "got a QP record");
    EXPECT_MSG(parse_error<HelloRecord>(m), "got a memory record");
    std::vector<uint8_t> junk = {'G', 'E', 'T', ' ', '/', ' ', 'H', 'T', 'T', 'P', '/', '1', '.', '1'};
    EXPECT_MSG(parse_error<HelloRecord>(junk), "not a gpuverbs record: magic 0x20544547");
}

TEST(OobRecord, UnsupportedVersionAndWrongType) {
    std::vector<uint8_t> p = qp_payload(QpFields{});
    EXPECT_MSG(parse_error<QpRecord>(raw_record(kQpRecordMagic, 2, 1, p)),
               "record version 2, this build reads version 3");
    EXPECT_MSG(parse_error<QpRecord>(raw_record(kQpRecordMagic, 4, 1, p)),
               "record version 4, this build reads version 3");
    EXPECT_MSG(parse_error<QpRecord>(raw_record(kQpRecordMagic, 0, 1, p)),
               "record version 0, this build reads version 3");
    EXPECT_MSG(parse_error<HelloRecord>(raw_hello(1, 1, 1, 0, 7)),
               "record version 7, this build reads version 3");
    EXPECT_MSG(parse_error<QpRecord>(raw_record(kQpRecordMagic, kRecordVersion, 2, p)),
               "record type 2 disagrees with its magic (type 1)");
}

TEST(OobRecord, TruncatedAtEveryLength) {
    for (const std::vector<uint8_t>& full :
         {raw_qp(QpFields{}), raw_memory(0x1000, 64, 1, kRemoteRead), raw_hello(3, 4, 1)}) {
        for (size_t n = 0; n < full.size(); ++n) {
            std::string qp = parse_error<QpRecord>(std::vector<uint8_t>(full.begin(), full.begin() + n));
            std::string mem = parse_error<MemoryRecord>(std::vector<uint8_t>(full.begin(), full.begin() + n));
            std::string hello =
                parse_error<HelloRecord>(std::vector<uint8_t>(full.begin(), full.begin() + n));
            // The parser of the right type says truncated; all three reject.
            for (const std::string* m : {&qp, &mem, &hello}) EXPECT_EQ(m->find("<"), std::string::npos) << *m;
            const std::string& right = full[2] == 'Q' ? qp : full[2] == 'M' ? mem : hello;
            EXPECT_MSG(right, "record truncated: " + std::to_string(n) + " bytes");
        }
    }
    std::vector<uint8_t> b = raw_qp(QpFields{});
    b.pop_back();
    EXPECT_MSG(parse_error<QpRecord>(b), "record truncated: 59 bytes, header says 60");
    EXPECT_MSG(remote_error([] { QpRecord::parse(nullptr, 0); }),
               "record truncated: 0 bytes, shorter than the 12-byte header");
}

TEST(OobRecord, OversizedAndTrailingBytes) {
    std::vector<uint8_t> b = raw_qp(QpFields{});
    b.push_back(0);
    EXPECT_MSG(parse_error<QpRecord>(b), "record oversized: 61 bytes, header says 60 (1 trailing bytes)");
    std::vector<uint8_t> two = raw_memory(0x1000, 64, 1, kRemoteRead);
    std::vector<uint8_t> second = two;
    two.insert(two.end(), second.begin(), second.end());
    EXPECT_MSG(parse_error<MemoryRecord>(two), "record oversized: 80 bytes, header says 40");
    // Payload lengths outside what the type allows.
    EXPECT_MSG(parse_error<MemoryRecord>(raw_record(kMemoryRecordMagic, kRecordVersion, 2, std::vector<uint8_t>(25))),
               "payload length 25 out of range (24 bytes)");
    EXPECT_MSG(parse_error<QpRecord>(raw_record(kQpRecordMagic, kRecordVersion, 1, std::vector<uint8_t>(149))),
               "payload length 149 out of range (36..148 bytes)");
    EXPECT_MSG(parse_error<QpRecord>(raw_record(kQpRecordMagic, kRecordVersion, 1, {}, true, -1)),
               "payload length 0 out of range");
    // A header claiming 4 GiB on a short buffer.
    EXPECT_MSG(
        parse_error<HelloRecord>(
            raw_record(kHelloMagic, kRecordVersion, 3, std::vector<uint8_t>(12), true, 0xFFFFFFFEll)),
        "payload length 4294967294 out of range");
}

TEST(OobRecord, BadChecksum) {
    std::vector<uint8_t> b = raw_qp(QpFields{});
    b[16] ^= 0x40;  // qpn byte
    EXPECT_MSG(parse_error<QpRecord>(b), "record checksum mismatch: stored 0x");
    std::vector<uint8_t> c = raw_memory(0x1000, 64, 1, kRemoteRead);
    c.back() ^= 1;
    EXPECT_MSG(parse_error<MemoryRecord>(c), "checksum mismatch");
    std::vector<uint8_t> p = qp_payload(QpFields{});
    EXPECT_MSG(parse_error<QpRecord>(raw_record(kQpRecordMagic, kRecordVersion, 1, p, false)),
               "stored 0xdeadbeef, computed 0x");
}

TEST(OobRecord, QpFieldsOutOfRange) {
    auto with = [](auto change) {
        QpFields f;
        change(f);
        return parse_error<QpRecord>(raw_qp(f));
    };
    EXPECT_MSG(with([](QpFields& f) { f.qpn = 1u << 24; }), "qpn 0x1000000 out of range (24 bits)");
    EXPECT_MSG(with([](QpFields& f) { f.qpn = ~0u; }), "qpn 0xffffffff out of range");
    EXPECT_MSG(with([](QpFields& f) { f.psn = 1u << 24; }), "psn 0x1000000 out of range (24 bits)");
    for (uint32_t mtu : {0u, 128u, 300u, 768u, 8192u, 4097u})
        EXPECT_MSG(with([&](QpFields& f) { f.mtu = mtu; }),
                   "path MTU " + std::to_string(mtu) + " is not 256, 512, 1024, 2048 or 4096");
    EXPECT_MSG(with([](QpFields& f) { f.backend = 0; }), "unknown backend code 0");
    EXPECT_MSG(with([](QpFields& f) { f.backend = 9; }), "unknown backend code 9");
    EXPECT_MSG(with([](QpFields& f) { f.name = "soft\ncpu"; }), "non-printable byte 0xa at offset 4");
    EXPECT_MSG(with([](QpFields& f) { f.name = std::string("soft") + char(0x7f) + "cpu"; }),
               "non-printable byte 0x7f");
    EXPECT_MSG(with([](QpFields& f) { f.name[0] = '\0'; }), "non-printable byte 0x0 at offset 0");
    EXPECT_MSG(with([](QpFields& f) { f.name_len = 7; }),
               "payload length 44 disagrees with the lengths it names (36 + 0 backend-specific + 7 name bytes)");
    EXPECT_MSG(with([](QpFields& f) { f.name_len = 65, f.name = std::string(64, 'x'); }),
               "device name length 65 exceeds 64");
    EXPECT_MSG(with([](QpFields& f) { f.name_len = 65, f.name = std::string(65, 'x'); }),
               "device name length 65 exceeds 64");
    EXPECT_MSG(with([](QpFields& f) { f.extra_len = 49; }), "backend-specific part of 49 bytes exceeds 48");
    EXPECT_MSG(with([](QpFields& f) { f.extra_len = 4; }),
               "payload length 44 disagrees with the lengths it names (36 + 4 backend-specific + 8 name bytes)");
    EXPECT_MSG(with([](QpFields& f) { f.reserved = 1; }), "reserved bytes are not zero");
    EXPECT_MSG(with([](QpFields& f) { f.reserved2 = 1; }), "reserved bytes are not zero");
    // The software-device locator.
    auto loc = [](QpFields& f) {
        f.loc = true;
        f.pid = 77, f.arena_fd = 5, f.arena_base = 0x110000000000ull, f.arena_size = 1ull << 30;
        f.qp_context = 0x110000002000ull;
    };
    EXPECT_MSG(with([&](QpFields& f) { loc(f), f.backend = 2; }),
               "a mlx5 endpoint carries 48 backend-specific bytes (expected none)");
    EXPECT_MSG(with([&](QpFields& f) { loc(f), f.backend = 3; }),
               "a verbs endpoint carries 48 backend-specific bytes (expected none)");
    // The 8 name bytes read as an 8-byte backend-specific part.
    EXPECT_MSG(with([&](QpFields& f) { f.name_len = 0, f.extra_len = 8; }),
               "software-device endpoint part of 8 bytes, expected 0, 32 or 48");
    EXPECT_MSG(with([&](QpFields& f) { loc(f), f.pid = 0; }), "software-device locator without a pid");
    EXPECT_MSG(with([&](QpFields& f) { loc(f), f.pid = 4194305; }), "pid 4194305 out of range");
    EXPECT_MSG(with([&](QpFields& f) { loc(f), f.arena_size = 0; }),
               "software-device locator without an arena names an arena descriptor or address");
    EXPECT_MSG(with([&](QpFields& f) { loc(f), f.arena_fd = 0x80000000u; }), "arena descriptor 2147483648 out of range");
    EXPECT_MSG(with([&](QpFields& f) { loc(f), f.arena_base += 8; }), "is not page-aligned");
    EXPECT_MSG(with([&](QpFields& f) { loc(f), f.arena_size = 4097; }), "is not page-aligned");
    EXPECT_MSG(with([&](QpFields& f) { loc(f), f.arena_base = 1ull << 57; }), "is not a user address range");
    EXPECT_MSG(with([&](QpFields& f) { loc(f), f.arena_size = ~0ull << 12; }), "is not a user address range");
    EXPECT_MSG(with([&](QpFields& f) { loc(f), f.qp_context = f.arena_base + f.arena_size; }),
               "QP context address 0x110040000000 is not an aligned address inside the arena");
    EXPECT_MSG(with([&](QpFields& f) { loc(f), f.qp_context = f.arena_base - 8; }), "inside the arena");
    EXPECT_MSG(with([&](QpFields& f) { loc(f), f.qp_context += 4; }), "inside the arena");
    // Every field at its limit is accepted.
    QpFields ok;
    ok.qpn = ok.psn = 0xFFFFFF;
    ok.name_len = 64, ok.name = std::string(64, ' ');
    EXPECT_NO_THROW(QpRecord::parse(raw_qp(ok)));
    loc(ok);
    ok.pid = 4194304, ok.qp_context = ok.arena_base + ok.arena_size - 8;
    EXPECT_NO_THROW(QpRecord::parse(raw_qp(ok)));
    QpFields gpu;  // a GPU software device: a pid, no arena
    gpu.loc = true;
    gpu.pid = 1;
    EXPECT_NO_THROW(QpRecord::parse(raw_qp(gpu)));
}

TEST(OobRecord, MemoryAndHelloFieldsOutOfRange) {
    EXPECT_MSG(parse_error<MemoryRecord>(raw_memory(0x1000, 0, 1, kRemoteRead)),
               "buffer length 0 (an exported buffer cannot be empty)");
    EXPECT_MSG(parse_error<MemoryRecord>(raw_memory(~0ull - 9, 11, 1, kRemoteRead)),
               "wraps around the address space");
    EXPECT_MSG(parse_error<MemoryRecord>(raw_memory(0x1000, 8, 1, 0x10)),
               "access 0x10 has bits outside gv::Access (0xf)");
    EXPECT_MSG(parse_error<HelloRecord>(raw_hello(kMaxExchangeRecords + 1, 0, 1)),
               "QP record count 65537 exceeds 65536");
    EXPECT_MSG(parse_error<HelloRecord>(raw_hello(0, ~0u, 1)),
               "memory record count 4294967295 exceeds 65536");
    EXPECT_MSG(parse_error<HelloRecord>(raw_hello(0, 0, 4)), "unknown backend code 4");
    EXPECT_MSG(parse_error<HelloRecord>(raw_hello(0, 0, 1, 5)), "reserved byte 9 is 0x5, must be 0");
}

TEST(OobRecord, SerializeRefusesInvalidLocalValues) {
    QpEndpoint e;
    e.qpn = 1u << 24;
    EXPECT_THROW(QpRecord(e).serialize(), InvalidUsage);
    e.qpn = 1, e.backend = Backend::Auto;
    EXPECT_THROW(QpRecord(e).serialize(), InvalidUsage);
    e.backend = Backend::Soft, e.mtu = 1500;
    EXPECT_THROW(QpRecord(e).serialize(), InvalidUsage);
    e.mtu = 4096, e.device = std::string(65, 'x');
    EXPECT_THROW(QpRecord(e).serialize(), InvalidUsage);
    e.device = "ok";
    EXPECT_NO_THROW(QpRecord(e).serialize());
    e.extra = gv::detail::soft::encode(gv::detail::soft::Locator{0, 0, 0, 4096, 0});  // an arena, no pid
    EXPECT_THROW(QpRecord(e).serialize(), InvalidUsage);
    e.extra = EndpointExtra{};
    EXPECT_THROW(MemoryRecord(RemoteBuffer{0x1000, 0, 1, 0}).serialize(), InvalidUsage);
    EXPECT_THROW(MemoryRecord(RemoteBuffer{0x1000, 8, 1, 1u << 4}).serialize(), InvalidUsage);
    EXPECT_THROW((HelloRecord{Backend::Soft, kMaxExchangeRecords + 1, 0}.serialize()), InvalidUsage);
}

// Thousands of random and mutated buffers: each parser either accepts (and then the record
// re-serializes to the very same bytes) or throws RemoteError. Nothing else, ever.
TEST(OobRecord, FuzzParsersWithRandomAndMutatedBuffers) {
    std::mt19937_64 r(20240611);
    auto valid = [&](int kind) {
        switch (kind) {
            case 0: return QpRecord(random_endpoint(r)).serialize();
            case 1: return MemoryRecord(random_buffer(r)).serialize();
            default: return HelloRecord{Backend::Verbs, uint32_t(r() % 100), uint32_t(r() % 100)}.serialize();
        }
    };
    auto refix_crc = [](std::vector<uint8_t>& b) {
        if (b.size() < 16) return;
        uint32_t c = crc32(b.data(), b.size() - 4);
        for (int i = 0; i < 4; ++i) b[b.size() - 4 + i] = uint8_t(c >> (8 * i));
    };
    size_t accepted[3] = {}, rejected[3] = {};
    for (int it = 0; it < 30000; ++it) {
        std::vector<uint8_t> b;
        int mutation = int(r() % 7);
        if (mutation == 0) {  // pure noise, sometimes behind a valid magic
            b.resize(r() % 128);
            for (auto& c : b) c = uint8_t(r());
            if (b.size() >= 4 && r() % 2) {
                static const uint32_t magics[] = {kQpRecordMagic, kMemoryRecordMagic, kHelloMagic};
                uint32_t m = magics[r() % 3];
                for (int i = 0; i < 4; ++i) b[i] = uint8_t(m >> (8 * i));
            }
        } else {
            b = valid(int(r() % 3));
            switch (mutation) {
                case 1:  // bit flips
                    for (int k = 1 + int(r() % 4); k > 0; --k) b[r() % b.size()] ^= uint8_t(1u << (r() % 8));
                    break;
                case 2:  // truncation
                    b.resize(r() % b.size());
                    break;
                case 3:  // extension
                    for (int k = 1 + int(r() % 40); k > 0; --k) b.push_back(uint8_t(r()));
                    break;
                case 4:  // payload bytes changed, checksum made right again: reaches field checks
                    for (int k = 1 + int(r() % 3); k > 0 && b.size() > 16; --k)
                        b[12 + r() % (b.size() - 16)] = uint8_t(r() % 4 ? r() : 0xFF);
                    refix_crc(b);
                    break;
                case 5:  // header bytes changed, checksum made right again
                    b[4 + r() % 8] = uint8_t(r());
                    refix_crc(b);
                    break;
                case 6:  // length field and size changed together, checksum made right again
                {
                    size_t n = r() % 120;
                    b.resize(12 + n + 4, uint8_t(r()));
                    for (int i = 0; i < 4; ++i) b[8 + i] = uint8_t(n >> (8 * i));
                    refix_crc(b);
                    break;
                }
            }
        }
        for (int kind = 0; kind < 3; ++kind) {
            try {
                std::vector<uint8_t> again;
                if (kind == 0) again = QpRecord(QpRecord::parse(b.data(), b.size())).serialize();
                if (kind == 1) again = MemoryRecord(MemoryRecord::parse(b.data(), b.size())).serialize();
                if (kind == 2) again = HelloRecord::parse(b.data(), b.size()).serialize();
                ++accepted[kind];
                ASSERT_EQ(again, b) << "iteration " << it << ": accepted a record that is not canonical";
            } catch (const RemoteError&) {
                ++rejected[kind];
            } catch (const std::exception& e) {
                FAIL() << "iteration " << it << " parser " << kind << " threw something else: " << e.what();
            }
        }
    }
    // The mutations reached both outcomes for every parser (the test is not vacuous).
    for (int kind = 0; kind < 3; ++kind) {
        EXPECT_GT(accepted[kind], 100u) << "parser " << kind;
        EXPECT_GT(rejected[kind], 10000u) << "parser " << kind;
    }
}
