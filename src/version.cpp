#include <sqlock/version.hpp>

namespace sqlock {

std::string_view version() noexcept { return SQLOCK_VERSION_STRING; }

}  // namespace sqlock
