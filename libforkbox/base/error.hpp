// One error type for the whole runtime: an errno (0 when none applies) and a context chain,
// outermost first: "create: mount /proc: Operation not permitted".
#pragma once

#include <cerrno>
#include <cstring>
#include <expected>
#include <string>
#include <string_view>
#include <utility>

namespace forkbox {

class Error {
public:
    Error() = default;
    // errno is kept for callers to test; its text is appended to the message only when
    // show_errno is set (failed syscalls), not for invalid input that merely carries EINVAL.
    Error(int err, std::string message, bool show_errno = false)
        : errno_(err), message_(std::move(message)), show_errno_(show_errno) {}

    int errnum() const { return errno_; }
    // Message without the errno text.
    const std::string& context() const { return message_; }
    // Full text: context chain plus strerror of the errno, as the CLI prints it.
    std::string what() const {
        if (errno_ == 0 || !show_errno_) return message_;
        std::string s = message_;
        s += ": ";
        s += std::strerror(errno_);
        return s;
    }
    // Prepends context: err.wrap("create") turns "mount /proc" into "create: mount /proc".
    Error wrap(std::string_view outer) const& {
        Error e = *this;
        e.message_ = std::string(outer) + ": " + message_;
        return e;
    }
    Error wrap(std::string_view outer) && {
        message_ = std::string(outer) + ": " + message_;
        return std::move(*this);
    }

private:
    int errno_ = 0;
    std::string message_;
    bool show_errno_ = false;
};

template <typename T = void>
using Result = std::expected<T, Error>;

// An error from the current errno, e.g. `return sys_error("mount " + target);`.
inline std::unexpected<Error> sys_error(std::string context) {
    return std::unexpected(Error(errno, std::move(context), true));
}
inline std::unexpected<Error> sys_error(int err, std::string context) {
    return std::unexpected(Error(err, std::move(context), true));
}
// An error with no errno: invalid input and the like.
inline std::unexpected<Error> fail(std::string message) {
    return std::unexpected(Error(0, std::move(message)));
}
inline std::unexpected<Error> fail(int err, std::string message) {
    return std::unexpected(Error(err, std::move(message)));
}

}  // namespace forkbox

// Propagates an error from a Result-returning expression, optionally wrapped with context.
#define FB_TRY(expr)                                              \
    do {                                                          \
        auto fb_try_r_ = (expr);                                  \
        if (!fb_try_r_) return std::unexpected(fb_try_r_.error()); \
    } while (0)

#define FB_TRY_CTX(expr, ctx)                                              \
    do {                                                                   \
        auto fb_try_r_ = (expr);                                           \
        if (!fb_try_r_) return std::unexpected(fb_try_r_.error().wrap(ctx)); \
    } while (0)

// Assigns the value of a Result-returning expression or propagates its error.
#define FB_ASSIGN(lhs, expr)                                         \
    auto FB_CAT_(fb_r_, __LINE__) = (expr);                          \
    if (!FB_CAT_(fb_r_, __LINE__))                                   \
        return std::unexpected(FB_CAT_(fb_r_, __LINE__).error());    \
    lhs = std::move(*FB_CAT_(fb_r_, __LINE__))
#define FB_CAT_(a, b) FB_CAT2_(a, b)
#define FB_CAT2_(a, b) a##b
