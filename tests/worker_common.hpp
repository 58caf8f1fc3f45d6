// sqlock tests — what the contention worker programs (worker.cpp,
// row_worker.cpp) share: the clock of their records, the counter they bump
// under the lock, the record line, and their error exit. test_env.hpp includes
// it for steady_ns(); read_records() there reads what write_record() writes.
// Only the standard library and the platform: the workers link sqlock alone.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <ostream>
#include <stdexcept>
#include <string>
#include <thread>
#include <typeinfo>

namespace sqlock_test {

/// Steady clock (CLOCK_MONOTONIC) in ns: comparable across processes on one host.
inline std::int64_t steady_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

/// The critical section of a contention worker: read the integer in
/// `counter_file`, `pause()`, write it back plus one (plain file I/O, no file
/// locking: only the lock protects it).
template <class Pause>
void bump_counter(std::string const& counter_file, Pause pause) {
    long long value = 0;
    {
        std::ifstream in(counter_file);
        if (!(in >> value)) throw std::runtime_error("cannot read the counter in " + counter_file);
    }
    pause();
    {
        std::ofstream out(counter_file, std::ios::trunc);
        out << value + 1 << "\n";
        out.close();
        if (!out) throw std::runtime_error("cannot write the counter in " + counter_file);
    }
}

/// The records file of a worker, opened for appending.
inline std::ofstream open_records(std::string const& record_file) {
    std::ofstream records(record_file, std::ios::app);
    if (!records) throw std::runtime_error("cannot open " + record_file);
    return records;
}

/// One critical section: "token enter_ns exit_ns pid [invoke_ns]", flushed at
/// once. `invoke` (when not negative) is when the worker started asking for
/// this grant: an invoke inside another process's critical section is evidence
/// that the processes contended (test_env.hpp's count_contended()).
inline void write_record(std::ostream& records, std::int64_t token, std::int64_t enter, std::int64_t exit, long pid,
                         std::int64_t invoke = -1) {
    records << token << ' ' << enter << ' ' << exit << ' ' << pid;
    if (invoke >= 0) records << ' ' << invoke;
    records << '\n' << std::flush;
}

/// The worker's side of a start barrier: create `ready_file` (holding the
/// pid), then wait for the test to create `go_file` once every worker is
/// ready, so that none starts before all of them can contend. Throws when no
/// start signal comes within `limit`.
inline void start_barrier(std::filesystem::path const& ready_file, std::filesystem::path const& go_file,
                          std::chrono::seconds limit = std::chrono::seconds(60)) {
    {
        std::ofstream ready(ready_file);
        ready << ::getpid() << "\n";
        if (!ready) throw std::runtime_error(std::string("cannot write the ready file ").append(ready_file.string()));
    }
    auto const until = std::chrono::steady_clock::now() + limit;
    while (!std::filesystem::exists(go_file)) {
        if (std::chrono::steady_clock::now() > until)
            throw std::runtime_error(std::string("no start signal (")
                                         .append(go_file.string())
                                         .append(") within ")
                                         .append(std::to_string(limit.count()))
                                         .append(" s: did the test die?"));
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
}

/// A worker's error exit: "<program>[<pid>]: <type>: <what>" on stderr, and 2.
inline int report_failure(char const* program, std::exception const& e) {
    std::cerr << program << "[" << ::getpid() << "]: " << typeid(e).name() << ": " << e.what() << "\n";
    return 2;
}

}  // namespace sqlock_test
