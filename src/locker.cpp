#include "detail/locker_impl.hpp"

#include <sqlock/errors.hpp>
#include <sqlock/locker.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <thread>

namespace sqlock {

namespace detail {
namespace {

constexpr std::size_t max_name_bytes = 255;
constexpr auto min_ttl = std::chrono::milliseconds(10);
constexpr auto max_ttl = std::chrono::hours(24 * 7);

// Strict UTF-8: no overlong forms, no surrogates, nothing above U+10FFFF.
bool valid_utf8(std::string_view s) {
    for (std::size_t i = 0; i < s.size();) {
        auto c = static_cast<unsigned char>(s[i]);
        std::size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
        if (len == 0 || i + len > s.size()) return false;
        std::uint32_t cp = len == 1 ? c : c & (0x7F >> len);
        for (std::size_t k = 1; k < len; ++k) {
            auto cc = static_cast<unsigned char>(s[i + k]);
            if ((cc & 0xC0) != 0x80) return false;
            cp = (cp << 6) | (cc & 0x3F);
        }
        constexpr std::uint32_t min_for_len[] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min_for_len[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
        i += len;
    }
    return true;
}

void validate_text(std::string_view what, std::string_view value) {
    if (value.empty()) throw usage_error("sqlock: the " + std::string(what) + " is empty: give 1 to 255 bytes");
    if (value.size() > max_name_bytes)
        throw usage_error("sqlock: the " + std::string(what) + " is " + std::to_string(value.size()) +
                          " bytes long: at most 255 bytes are allowed (hash longer keys)");
    if (value.find('\0') != std::string_view::npos)
        throw usage_error("sqlock: the " + std::string(what) + " contains a NUL byte: use text without NUL");
    if (!valid_utf8(value))
        throw usage_error("sqlock: the " + std::string(what) + " is not valid UTF-8: encode it as UTF-8 (or hex)");
}

std::string hostname() {
    char buf[256] = {};
    if (gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "localhost";
    return buf;
}

}  // namespace

void validate_name(std::string_view name) { validate_text("lock name", name); }

locker_impl::locker_impl(locker_options options) : options_(std::move(options)) {
    if (options_.ttl < min_ttl || options_.ttl > max_ttl)
        throw usage_error("sqlock: ttl " + std::to_string(options_.ttl.count()) +
                          " ms is out of range: use 10 ms to 7 days (renew longer holds)");
    if (!options_.owner.empty()) validate_text("owner", options_.owner);
    if (options_.backoff_min <= std::chrono::milliseconds::zero() || options_.backoff_max < options_.backoff_min)
        throw usage_error("sqlock: backoff_min must be positive and backoff_max at least backoff_min");
    std::random_device rd;
    char id[17];
    std::snprintf(id, sizeof id, "%08x%08x", rd(), rd());
    instance_ = id;
    owner_prefix_ = hostname().substr(0, 64);
}

std::string locker_impl::owner_for_this_thread() const {
    if (!options_.owner.empty()) return options_.owner;
    // getpid() at call time, so a forked child is a different owner.
    return owner_prefix_ + "/" + std::to_string(getpid()) + "/" + instance_ + "/" + std::to_string(gettid());
}

std::chrono::steady_clock::time_point locker_impl::valid_until(
    std::chrono::steady_clock::time_point sent) const noexcept {
    // Redlock's margin: 1 % of the TTL for clock-rate drift, plus 1 ms.
    auto drift = options_.ttl / 100 + std::chrono::milliseconds(1);
    return sent + options_.ttl - drift;
}

lease locker_impl::acquire_until(std::string const& name, std::chrono::milliseconds wait) {
    using clock = std::chrono::steady_clock;
    auto const deadline = clock::now() + wait;
    thread_local std::mt19937_64 rng{std::random_device{}()};
    auto ceiling = options_.backoff_min;
    for (;;) {
        if (auto got = try_acquire(name)) return std::move(*got);
        auto now = clock::now();
        if (now >= deadline)
            throw timeout("sqlock: lock '" + name + "' was still held by another owner after waiting " +
                          std::to_string(wait.count()) + " ms: retry later or wait longer");
        // Full jitter: sleep a uniform random time up to a ceiling that doubles, capped.
        auto pause = std::chrono::microseconds(std::uniform_int_distribution<long long>(
            0, std::chrono::duration_cast<std::chrono::microseconds>(ceiling).count())(rng));
        ceiling = std::min(ceiling * 2, options_.backoff_max);
        std::this_thread::sleep_for(std::min<clock::duration>(pause, deadline - now));
    }
}

}  // namespace detail

locker::locker(std::shared_ptr<detail::locker_impl> impl) noexcept : impl_(std::move(impl)) {}

std::optional<lease> locker::try_acquire(std::string_view name) {
    detail::validate_name(name);
    return impl_->try_acquire(std::string(name));
}

lease locker::acquire(std::string_view name, std::chrono::milliseconds wait) {
    detail::validate_name(name);
    if (wait < std::chrono::milliseconds::zero())
        throw usage_error("sqlock: the wait for lock '" + std::string(name) + "' is negative: use 0 or more");
    return impl_->acquire_until(std::string(name), wait);
}

locker_options const& locker::options() const noexcept { return impl_->options(); }

}  // namespace sqlock
