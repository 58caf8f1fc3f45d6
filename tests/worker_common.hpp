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
#include <fstream>
#include <iostream>
#include <ostream>
#include <stdexcept>
#include <string>
#include <typeinfo>

namespace sqlock_test {

/// Steady clock (CLOCK_MONOTONIC) in ns: comparable across processes on one host.
inline std::int64_t steady_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
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

/// One critical section: "token enter_ns exit_ns pid", flushed at once.
inline void write_record(std::ostream& records, std::int64_t token, std::int64_t enter, std::int64_t exit,
                         long pid) {
    records << token << ' ' << enter << ' ' << exit << ' ' << pid << '\n' << std::flush;
}

/// A worker's error exit: "<program>[<pid>]: <type>: <what>" on stderr, and 2.
inline int report_failure(char const* program, std::exception const& e) {
    std::cerr << program << "[" << ::getpid() << "]: " << typeid(e).name() << ": " << e.what() << "\n";
    return 2;
}

}  // namespace sqlock_test
