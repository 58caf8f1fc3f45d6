#include <sqlock/version.hpp>

namespace sqlock {

std::string_view version() noexcept { return SQLOCK_VERSION_STRING; }

int protocol_version() noexcept { return 1; }

}  // namespace sqlock
