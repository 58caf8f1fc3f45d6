// sqlock — SQLOCK_EXPORT marks the declarations libsqlock exports: every public class and free
// function. The library is compiled with hidden visibility (CMake: CXX_VISIBILITY_PRESET hidden,
// VISIBILITY_INLINES_HIDDEN), so a shared libsqlock.so exports these and nothing of sqlock::detail.
// The exception classes are marked too: their typeinfo must be one across the .so boundary for a
// program to catch what the library throws. For a static libsqlock.a the mark is harmless.
#pragma once

// SQLOCK_NO_EXPORT keeps a member of an exported class internal (a private constructor from
// sqlock::detail types).
#if defined(__GNUC__) || defined(__clang__)
#define SQLOCK_EXPORT __attribute__((visibility("default")))
#define SQLOCK_NO_EXPORT __attribute__((visibility("hidden")))
#else
#define SQLOCK_EXPORT
#define SQLOCK_NO_EXPORT
#endif
