// sqlock_battery_check <dir>: replays the checkers K1–K9 over a kept run directory (history*.jsonl,
// audit*.jsonl, nemesis*.jsonl, remaining*.jsonl, final.json; tests/faults/README.md), and a semaphore,
// rw-lock or election run's own checkers (final.json "coordination": coord_checkers.hpp). One summary
// line per checker, "(reported) " before those the run did not assert (final.json "asserted");
// exit 0 when every asserted checker passes, 1 on any violation of one, 2 when the input cannot be read.
#include "checkers.hpp"

#include <CLI/CLI.hpp>

#include <exception>
#include <iostream>

int main(int argc, char** argv) {
    CLI::App app{
        "Replay the reliability battery's checkers (K1-K9, and a coordination run's own) over a kept run directory."};
    std::string dir;
    bool all = false;
    app.add_option("dir", dir, "the run directory a failed battery test printed")->required();
    app.add_flag("-a,--all", all, "list every violation, not only the first few of each checker");
    CLI11_PARSE(app, argc, argv);

    std::vector<sqlock_battery::report> reports;
    try {
        reports = sqlock_battery::check_directory(dir);
    } catch (std::exception const& e) {
        std::cerr << "sqlock_battery_check: " << e.what() << '\n';
        return 2;
    }
    bool failed = false;
    for (auto const& r : reports) {
        std::cout << (r.asserted ? "" : "(reported) ") << r.summary() << '\n';
        failed = failed || (r.asserted && !r.ok());
        if (all)
            for (auto const& v : r.violations) std::cout << "  " << v.checker << ": " << v.what << '\n';
    }
    return failed ? 1 : 0;
}
