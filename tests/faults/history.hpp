// sqlock reliability battery — the recorded history: one JSON line per event.
//
// Written by test workers (tests/faults/*_worker.cpp) and the nemesis; read by the checkers
// (tests/faults/checkers.hpp). The format is the contract between the two and is described
// in tests/faults/README.md. Writers append one line per event and flush it at once, so a
// kill -9 loses at most the completion of the operation in flight; the checkers read a
// missing completion as `info` (the operation may or may not have happened), as Jepsen does.
#pragma once

#include <nlohmann/json.hpp>

#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace sqlock_battery {

/// The host-wide CLOCK_MONOTONIC, read by the raw syscall: libfaketime interposes libc's
/// clock_gettime (and fakes CLOCK_MONOTONIC by default), not the system call. Every process
/// of a run is on this one host, so this single clock orders events across all of them.
inline std::int64_t raw_monotonic_ns() noexcept {
    timespec ts{};
    ::syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &ts);
    return std::int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

/// One event. `op`: acquire | try_acquire | renew | release | reap | lost | write_fenced |
/// write_unfenced | read. `type`: invoke | ok | fail | info. Optional fields are left out
/// of the line when unset.
struct event {
    std::string proc;  ///< worker name, unique in the run ("w3", "reaper")
    std::int64_t pid = 0;
    std::int64_t thread = 0;  ///< worker-local thread number
    std::string op;
    std::string type;
    std::string lock;
    std::string owner;
    std::optional<std::int64_t> token;
    std::optional<std::int64_t> db_time_us;     ///< database time the statement returned (µs, UTC)
    std::optional<std::int64_t> expires_at_us;  ///< expires_at as stored (µs, UTC)
    std::optional<std::int64_t> validity_ms;    ///< what the library reported as left
    std::optional<std::int64_t> value;          ///< write_unfenced/read: the counter value written/read
    std::string error;                          ///< fail/info: the error's type and message
    std::int64_t mono_ns = 0;                   ///< raw_monotonic_ns() when the line was written
};

inline nlohmann::json to_json(event const& e) {
    nlohmann::json j{{"proc", e.proc}, {"pid", e.pid},   {"thread", e.thread}, {"op", e.op},
                     {"type", e.type}, {"lock", e.lock}, {"owner", e.owner},   {"mono_ns", e.mono_ns}};
    if (e.token) j["token"] = *e.token;
    if (e.db_time_us) j["db_time_us"] = *e.db_time_us;
    if (e.expires_at_us) j["expires_at_us"] = *e.expires_at_us;
    if (e.validity_ms) j["validity_ms"] = *e.validity_ms;
    if (e.value) j["value"] = *e.value;
    if (!e.error.empty()) j["error"] = e.error;
    return j;
}

inline event from_json(nlohmann::json const& j) {
    event e;
    e.proc = j.value("proc", "");
    e.pid = j.value("pid", std::int64_t{0});
    e.thread = j.value("thread", std::int64_t{0});
    e.op = j.at("op").get<std::string>();
    e.type = j.at("type").get<std::string>();
    e.lock = j.value("lock", "");
    e.owner = j.value("owner", "");
    auto opt = [&](char const* k) -> std::optional<std::int64_t> {
        if (auto it = j.find(k); it != j.end() && it->is_number_integer()) return it->get<std::int64_t>();
        return std::nullopt;
    };
    e.token = opt("token");
    e.db_time_us = opt("db_time_us");
    e.expires_at_us = opt("expires_at_us");
    e.validity_ms = opt("validity_ms");
    e.value = opt("value");
    e.error = j.value("error", "");
    e.mono_ns = j.at("mono_ns").get<std::int64_t>();
    return e;
}

/// Appends events to one file, a line each, flushed per line (O_APPEND: several processes may
/// share a file, each line is one write). Thread-safe.
class history_writer {
public:
    history_writer(std::string const& path, std::string proc)
        : file_(std::fopen(path.c_str(), "a")), proc_(std::move(proc)), pid_(::getpid()) {
        if (file_ == nullptr) throw std::runtime_error("history: cannot open " + path + " for appending");
    }
    history_writer(history_writer const&) = delete;
    history_writer& operator=(history_writer const&) = delete;
    ~history_writer() { std::fclose(file_); }

    /// Stamps proc, pid and mono_ns (the moment of writing) and appends the line.
    void write(event e) {
        e.proc = proc_;
        e.pid = pid_;
        e.mono_ns = raw_monotonic_ns();
        auto line = to_json(e).dump() + '\n';
        std::lock_guard lock(mutex_);
        std::fwrite(line.data(), 1, line.size(), file_);
        std::fflush(file_);
    }

private:
    std::FILE* file_;
    std::string proc_;
    std::int64_t pid_;
    std::mutex mutex_;
};

/// Reads every complete line of a history file. A torn line (a kill -9 mid-write) is ignored, its
/// event treated as never written: the last line without its newline, or a fragment that the next
/// writer of a shared file appended its own line to (that line is kept).
/// @throws std::invalid_argument the file cannot be opened, or a line is neither an event nor a
///         torn fragment followed by one
std::vector<event> read_history(std::string const& path);

}  // namespace sqlock_battery
