// The command-line convention of every gpuverbs tool and sample, written once (perftest's and
// GNU's):
//   --help, -h          the usage on stdout, exit status 0 (anywhere on the command line)
//   a usage error       "PROG: what was wrong with which option, and what was expected" and a
//                       hint to --help on stderr, exit status 2 (an unknown option, a missing
//                       or bad value, options that do not go together)
//   a runtime failure   "PROG: the reason" on stderr, exit status 1 (no GPU, no server, a
//                       failed work request, a peer that went away, ...)
//   out of memory       "PROG: out of memory ..." on stderr, exit status 1 (never an uncaught
//                       std::bad_alloc)
// Options take their value as the next argument or after '=' (--qps 4, --qps=4).
//
// Host code only, and no gpuverbs or CUDA header: tools/ and samples/ include it (samples
// through their include path).
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <new>
#include <stdexcept>
#include <string>
#include <system_error>

namespace gvcli {

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

/// A mistake on the command line: exit status 2. The message names the option.
class UsageError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

/// printf into a std::string.
inline std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
inline std::string format(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char small[512];
    const int n = std::vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) return fmt;
    if (size_t(n) < sizeof small) return std::string(small, size_t(n));
    std::string s(size_t(n) + 1, '\0');
    va_start(ap, fmt);
    std::vsnprintf(&s[0], s.size(), fmt, ap);
    va_end(ap);
    s.resize(size_t(n));
    return s;
}

/// The program's name as users typed it, without its directory.
inline std::string program_name(const char* argv0) {
    std::string s = argv0 ? argv0 : "gpuverbs";
    const size_t slash = s.rfind('/');
    return slash == std::string::npos ? s : s.substr(slash + 1);
}

/// Walks the command line, one argument at a time:
///   while (args.next()) {
///       if (args.is("--qps")) qps = args.integer(1, 1024);
///       else args.unknown();
///   }
/// Every parsing mistake throws UsageError naming the option.
class Args {
public:
    Args(int argc, char** argv) : argc_(argc), argv_(argv) {}

    /// Moves to the next argument; false after the last one.
    bool next() {
        if (has_inline_) throw UsageError(arg_ + " takes no value (got '" + inline_ + "')");
        if (++i_ >= argc_) return false;
        arg_ = argv_[i_];
        has_inline_ = false;
        inline_.clear();
        const size_t eq = arg_.find('=');
        if (arg_.rfind("--", 0) == 0 && eq != std::string::npos) {
            inline_ = arg_.substr(eq + 1);
            arg_.resize(eq);
            has_inline_ = true;
        }
        return true;
    }
    /// The current argument (of "--opt=value", the "--opt").
    const std::string& arg() const { return arg_; }
    bool is(const char* name) const { return arg_ == name; }
    bool is(const char* a, const char* b) const { return arg_ == a || arg_ == b; }
    /// True for an option ("-x", "--xyz"), false for a bare word (a HOST, say).
    bool is_option() const { return arg_.size() > 1 && arg_[0] == '-'; }

    /// The current option's value: after '=', or the next argument.
    std::string value() {
        if (has_inline_) {
            has_inline_ = false;
            return inline_;
        }
        if (i_ + 1 >= argc_) throw UsageError(arg_ + " needs a value");
        return argv_[++i_];
    }
    /// An integer value in [lo, hi]. size_suffix: K, M or G (powers of 1024) allowed.
    long long integer(long long lo, long long hi, bool size_suffix = false) {
        const std::string v = value();
        char* end = nullptr;
        errno = 0;
        long long n = std::strtoll(v.c_str(), &end, 10);
        bool ok = !v.empty() && errno == 0 && end != v.c_str();
        if (ok && size_suffix && *end && end[1] == '\0') {
            const char c = *end;
            const int shift = c == 'k' || c == 'K' ? 10 : c == 'm' || c == 'M' ? 20 : c == 'g' || c == 'G' ? 30 : 0;
            if (shift) {
                ok = n >= 0 && n <= (LLONG_MAX >> shift);
                n = ok ? n << shift : n;
                ++end;
            }
        }
        if (!ok || *end || n < lo || n > hi)
            throw UsageError(arg_ + " " + v + ": expected an integer in " + std::to_string(lo) + " .. " +
                             std::to_string(hi) + (size_suffix ? " (K, M or G suffix allowed)" : ""));
        return n;
    }
    /// A decimal number in (lo, hi].
    double number(double lo, double hi) {
        const std::string v = value();
        char* end = nullptr;
        const double d = std::strtod(v.c_str(), &end);
        if (v.empty() || *end || !(d > lo && d <= hi))
            throw UsageError(arg_ + " " + v + ": expected a number in (" + format("%g", lo) + ", " +
                             format("%g", hi) + "]");
        return d;
    }
    /// A value out of a fixed list.
    std::string one_of(std::initializer_list<const char*> choices) {
        const std::string v = value();
        std::string list;
        size_t k = 0;
        for (const char* c : choices) {
            if (v == c) return v;
            list += (k == 0 ? "" : k + 1 == choices.size() ? " or " : ", ") + std::string(c);
            ++k;
        }
        throw UsageError(arg_ + " " + v + ": expected " + list);
    }
    /// The current argument is not one of ours.
    [[noreturn]] void unknown() const {
        if (is_option()) throw UsageError("unknown option " + arg_);
        throw UsageError("unexpected argument '" + arg_ + "'");
    }

private:
    int argc_;
    char** argv_;
    int i_ = 0;
    std::string arg_, inline_;
    bool has_inline_ = false;
};

/// True when --help or -h is on the command line (before a "--").
inline bool wants_help(int argc, char** argv) {
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--") break;
        if (a == "--help" || a == "-h") return true;
    }
    return false;
}

/// Runs a tool's body(Args&) under the convention: --help prints `usage` on stdout (exit 0)
/// before anything else happens; UsageError exits 2, std::bad_alloc and any other exception
/// exit 1, each with one line on stderr. Returns the exit status.
template <class Body>
int run(int argc, char** argv, const std::string& usage, Body&& body) {
    const std::string prog = program_name(argc > 0 ? argv[0] : nullptr);
    if (wants_help(argc, argv)) {
        std::fputs(usage.c_str(), stdout);
        std::fflush(stdout);
        return kExitOk;
    }
    try {
        Args args(argc, argv);
        return body(args);
    } catch (const UsageError& e) {
        std::fprintf(stderr, "%s: %s\nTry '%s --help' for more information.\n", prog.c_str(), e.what(),
                     prog.c_str());
        return kExitUsage;
    } catch (const std::bad_alloc&) {
        std::fprintf(stderr,
                     "%s: out of memory: a buffer or a thread could not be allocated (ask for less: "
                     "smaller sizes, fewer QPs or threads)\n",
                     prog.c_str());
        return kExitFailure;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "%s: %s\n", prog.c_str(), e.what());
        return kExitFailure;
    } catch (...) {
        std::fprintf(stderr, "%s: failed with an unknown exception\n", prog.c_str());
        return kExitFailure;
    }
}

/// Why this process can see no GPU, found without a CUDA call ("" when it may see one): no
/// NVIDIA driver on the machine, or CUDA_VISIBLE_DEVICES set to nothing. A tool that needs a
/// GPU says so before it does anything else, and before it starts MPS (gv::mps::ensure must
/// precede a process's first CUDA call; a CUDA call is what would tell for sure).
inline std::string no_gpu_reason() {
    if (::access("/dev/nvidiactl", F_OK) != 0) return "no NVIDIA driver on this machine (no /dev/nvidiactl)";
    const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
    if (v && !*v) return "no GPU visible (CUDA_VISIBLE_DEVICES is set to nothing)";
    return "";
}

}  // namespace gvcli
