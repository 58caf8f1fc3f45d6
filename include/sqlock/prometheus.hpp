// sqlock — the optional `sqlock::prometheus` component: sqlock's metrics as a
// prometheus-cpp Collectable. Built when prometheus-cpp is found; link
// `sqlock::prometheus` (find_package(sqlock COMPONENTS prometheus)) or
// `pkg-config sqlock-prometheus`.
//
// prometheus-cpp's Registry holds only the families it built itself, so the
// Collectable is registered next to it, where the user registers the Registry:
//
//     prometheus::Exposer exposer{"127.0.0.1:9464"};
//     auto registry = std::make_shared<prometheus::Registry>();      // the program's own metrics
//     auto locks = sqlock::prometheus::make_collectable();           // sqlock's, read at each scrape
//     exposer.RegisterCollectable(registry);
//     exposer.RegisterCollectable(locks);                            // keep `locks` alive while it is served
#pragma once

#include <sqlock/export.hpp>
#include <sqlock/metrics.hpp>

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include <memory>
#include <vector>

namespace sqlock::prometheus {

/// A Collectable that reads `m` (by default the process's metrics) at each
/// scrape. It keeps `m` alive.
[[nodiscard]] SQLOCK_EXPORT std::shared_ptr<::prometheus::Collectable> make_collectable(
    std::shared_ptr<metrics> m = metrics::global());

/// `families` as prometheus-cpp's families (a histogram's buckets cumulative, +Inf last).
[[nodiscard]] SQLOCK_EXPORT std::vector<::prometheus::MetricFamily> to_prometheus(
    std::vector<metric_family> const& families);

}  // namespace sqlock::prometheus
