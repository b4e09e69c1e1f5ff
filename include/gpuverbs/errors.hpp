// Typed errors of the host API. Every failure says what failed and why.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace gv {

/// Base of every exception gpuverbs throws.
class Error : public std::runtime_error {
public:
    explicit Error(const std::string& what) : std::runtime_error(what) {}
};

/// A system call failed; errno() holds its errno.
class SystemError : public Error {
public:
    SystemError(const std::string& what, int err);
    int error_code() const { return err_; }

private:
    int err_;
};

/// A CUDA runtime call failed.
class CudaError : public Error {
public:
    CudaError(const std::string& what, int code) : Error(what), code_(code) {}
    int code() const { return code_; }

private:
    int code_;
};

/// A libibverbs / mlx5dv call failed.
class VerbsError : public Error {
public:
    VerbsError(const std::string& what, int err) : Error(what), err_(err) {}
    int error_code() const { return err_; }

private:
    int err_;
};

/// The caller broke a documented rule (bad argument, wrong state, wrong order).
class InvalidUsage : public Error {
public:
    using Error::Error;
};

/// The backend or build lacks the feature asked for.
class NotSupported : public Error {
public:
    using Error::Error;
};

/// A bounded wait ran out of time.
class TimeoutError : public Error {
public:
    using Error::Error;
};

/// A completion reported an error syndrome.
class CompletionError : public Error {
public:
    CompletionError(const std::string& what, uint8_t syndrome) : Error(what), syndrome_(syndrome) {}
    uint8_t syndrome() const { return syndrome_; }

private:
    uint8_t syndrome_;
};

/// The peer misbehaved or went away (bad record, closed connection).
class RemoteError : public Error {
public:
    using Error::Error;
};

namespace detail {
[[noreturn]] void throw_errno(const char* call, const char* file, int line);
[[noreturn]] void throw_cuda(const char* call, int code, const char* file, int line);
[[noreturn]] void throw_invalid(const std::string& msg, const char* file, int line);
std::string hex(uint64_t v);
}  // namespace detail

}  // namespace gv

/// Throws SystemError when `call` returns a negative value.
#define GV_CHECK_ERRNO(call)                                                         \
    do {                                                                             \
        if ((call) < 0) ::gv::detail::throw_errno(#call, __FILE__, __LINE__);        \
    } while (0)

/// Throws InvalidUsage with `msg` (a std::string expression) unless `cond` holds.
#define GV_REQUIRE(cond, msg)                                                        \
    do {                                                                             \
        if (!(cond)) ::gv::detail::throw_invalid((msg), __FILE__, __LINE__);         \
    } while (0)
