// sqlock — the version of these headers (macros) and of the library a program
// runs with (sqlock::version()).
//
//     #if SQLOCK_VERSION >= 100     // 0.1.0 or later
//     std::cout << sqlock::version();
//
// The top-level CMakeLists.txt reads its project version from this file: it is
// the one place the version is written.
#pragma once

#include <sqlock/export.hpp>

#include <string_view>

#define SQLOCK_VERSION_MAJOR 0
#define SQLOCK_VERSION_MINOR 1
#define SQLOCK_VERSION_PATCH 0
/// The version as one number, MAJOR * 10000 + MINOR * 100 + PATCH, for `#if`.
#define SQLOCK_VERSION (SQLOCK_VERSION_MAJOR * 10000 + SQLOCK_VERSION_MINOR * 100 + SQLOCK_VERSION_PATCH)
/// "MAJOR.MINOR.PATCH"
#define SQLOCK_VERSION_STRING "0.1.0"

namespace sqlock {

/// The version of the library this program runs with, "MAJOR.MINOR.PATCH".
/// With a shared libsqlock it is the one loaded at run time, which may differ
/// from SQLOCK_VERSION_STRING of the headers the program was compiled with.
SQLOCK_EXPORT std::string_view version() noexcept;

/// The protocol this library speaks: the rules every client of the same lock
/// tables follows (how a row is taken, released and given its fencing token).
/// The schema records its protocol in `<prefix>_protocol`; a store refuses
/// tables of a newer protocol (sqlock::protocol_mismatch) before it changes
/// anything. Tables without the record speak protocol 1.
SQLOCK_EXPORT int protocol_version() noexcept;

}  // namespace sqlock
