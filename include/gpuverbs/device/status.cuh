// Status codes of device-side operations (kernels cannot throw).
#pragma once

#include "gpuverbs/config.hpp"

namespace gv {

enum class Status : int {
    Ok = 0,
    Timeout = 1,          ///< a bounded wait ran out of time
    CompletionError = 2,  ///< a completion carried an error syndrome (see Completion::status)
    CqOverrun = 3,        ///< the CQ overflowed: completions were lost (size it for the outstanding work)
    InvalidArgument = 4,  ///< the call's arguments break a documented limit
    QpNotReady = 5,       ///< the QP is not in RTS (no work can execute)
    QpError = 6,          ///< the QP is in the ERROR state
};

GV_HOST_DEVICE const char* status_name(Status s) {
    switch (s) {
        case Status::Ok: return "Ok";
        case Status::Timeout: return "Timeout";
        case Status::CompletionError: return "CompletionError";
        case Status::CqOverrun: return "CqOverrun";
        case Status::InvalidArgument: return "InvalidArgument";
        case Status::QpNotReady: return "QpNotReady";
        case Status::QpError: return "QpError";
    }
    return "UnknownStatus";
}

/// Wait forever (the unbounded variant of every waiting call).
inline constexpr uint64_t kWaitForever = ~0ull;

}  // namespace gv
