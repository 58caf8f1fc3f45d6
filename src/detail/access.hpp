// Internal: the library's way to the private parts of the public classes — a store's and a
// locker's shared implementation, and the constructors of lockers and leases from their internals.
// Each public class names `detail::access` its friend; nothing of this is installed.
#pragma once

#include <sqlock/lease.hpp>
#include <sqlock/locker.hpp>
#include <sqlock/store.hpp>

#include <memory>
#include <utility>

namespace sqlock::detail {

class lease_row;
class locker_impl;
class store_impl;

struct access {
    [[nodiscard]] static std::shared_ptr<store_impl> const& impl(store const& db) noexcept { return db.impl_; }
    [[nodiscard]] static std::shared_ptr<locker_impl> const& impl(locker const& l) noexcept { return l.impl_; }

    /// A locker over `impl` (the factories table_locker, row_locker, majority_locker).
    [[nodiscard]] static locker make_locker(std::shared_ptr<locker_impl> impl) noexcept {
        return locker(std::move(impl));
    }
    /// A lease holding `row` (a locker's grant, or another hold on the same row).
    [[nodiscard]] static lease make_lease(std::shared_ptr<lease_row> row) noexcept { return lease(std::move(row)); }
};

}  // namespace sqlock::detail
