// sqlock::prometheus: sqlock's metric families mapped onto prometheus-cpp's.
#include <sqlock/prometheus.hpp>

#include <limits>
#include <utility>

namespace sqlock::prometheus {
namespace {

class collectable final : public ::prometheus::Collectable {
public:
    explicit collectable(std::shared_ptr<metrics> m) : metrics_(std::move(m)) {}
    std::vector<::prometheus::MetricFamily> Collect() const override { return to_prometheus(metrics_->collect()); }

private:
    std::shared_ptr<metrics> metrics_;
};

::prometheus::MetricType type_of(metric_type t) {
    switch (t) {
        case metric_type::counter: return ::prometheus::MetricType::Counter;
        case metric_type::gauge: return ::prometheus::MetricType::Gauge;
        case metric_type::histogram: return ::prometheus::MetricType::Histogram;
    }
    return ::prometheus::MetricType::Untyped;
}

}  // namespace

std::shared_ptr<::prometheus::Collectable> make_collectable(std::shared_ptr<metrics> m) {
    return std::make_shared<collectable>(m ? std::move(m) : metrics::global());
}

std::vector<::prometheus::MetricFamily> to_prometheus(std::vector<metric_family> const& families) {
    std::vector<::prometheus::MetricFamily> out;
    out.reserve(families.size());
    for (auto const& f : families) {
        ::prometheus::MetricFamily pf;
        pf.name = f.name;
        pf.help = f.help;
        pf.type = type_of(f.type);
        for (auto const& s : f.samples) {
            ::prometheus::ClientMetric m;
            for (auto const& [name, value] : s.labels) m.label.push_back({name, value});
            switch (f.type) {
                case metric_type::counter: m.counter.value = s.value; break;
                case metric_type::gauge: m.gauge.value = s.value; break;
                case metric_type::histogram:
                    for (std::size_t i = 0; i < f.bounds.size() && i < s.buckets.size(); ++i)
                        m.histogram.bucket.push_back({s.buckets[i], f.bounds[i]});
                    m.histogram.bucket.push_back({s.count, std::numeric_limits<double>::infinity()});
                    m.histogram.sample_count = s.count;
                    m.histogram.sample_sum = s.sum;
                    break;
            }
            pf.metric.push_back(std::move(m));
        }
        out.push_back(std::move(pf));
    }
    return out;
}

}  // namespace sqlock::prometheus
