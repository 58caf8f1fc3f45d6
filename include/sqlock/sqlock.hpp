// sqlock — distributed locks in SQL tables. The umbrella header.
#pragma once

#include <sqlock/admin.hpp>
#include <sqlock/coordination.hpp>
#include <sqlock/errors.hpp>
#include <sqlock/export.hpp>
#include <sqlock/fence.hpp>
#include <sqlock/lease.hpp>
#include <sqlock/locker.hpp>
#include <sqlock/majority.hpp>
#include <sqlock/metrics.hpp>
#include <sqlock/options.hpp>
#include <sqlock/reaper.hpp>
#include <sqlock/stats.hpp>
#include <sqlock/store.hpp>
#include <sqlock/version.hpp>
