// sqlock-demo: several processes contend for one lock; only one is ever inside
// the critical section.
//
// Each worker process loops: acquire "demo:critical-section", claim a marker
// file with O_EXCL (which fails if another process is inside), read-increment-
// write a counter file with no other protection, drop the marker, release.
// At the end the counter must equal processes x iterations, and no worker may
// ever have found the marker taken.
#include <sqlock/sqlock.hpp>

#include <CLI/CLI.hpp>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>

using namespace std::chrono_literals;

namespace {

long read_counter(std::string const& path) {
    std::ifstream in(path);
    long value = 0;
    in >> value;
    return value;
}

int worker(std::string const& url, std::string const& dir, int index, int iterations) {
    sqlock::store db{url};
    auto locks = sqlock::table_locker(db, {.ttl = 10s});
    int overlaps = 0;
    for (int i = 0; i < iterations; ++i) {
        auto lease = locks.acquire("demo:critical-section", 60s);
        int marker = ::open((dir + "/inside").c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644);
        if (marker < 0) ++overlaps;  // somebody else is inside: the lock failed
        long value = read_counter(dir + "/counter");
        std::this_thread::sleep_for(1ms);  // widen the window a broken lock would show
        std::ofstream(dir + "/counter") << value + 1 << '\n';
        std::printf("worker %d (pid %d) inside with token %lld: counter %ld -> %ld\n", index, getpid(),
                    static_cast<long long>(lease.token()), value, value + 1);
        std::fflush(stdout);
        if (marker >= 0) {
            ::close(marker);
            ::unlink((dir + "/inside").c_str());
        }
        lease.release();
    }
    return overlaps == 0 ? 0 : 3;
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"sqlock-demo: processes contend for one lock; only one is inside at a time"};
    std::string url = "sqlite:sqlock.db";
    int processes = 4;
    int iterations = 10;
    app.add_option("--db", url, "database URL")->capture_default_str();
    app.add_option("--processes", processes, "worker processes")->check(CLI::Range(1, 64))->capture_default_str();
    app.add_option("--iterations", iterations, "critical sections per worker")
        ->check(CLI::Range(1, 100000))
        ->capture_default_str();
    CLI11_PARSE(app, argc, argv);

    try {
        sqlock::store db{url, {.create_schema = true}};  // create the tables once, before forking
        std::cout << "sqlock-demo: " << processes << " processes x " << iterations << " critical sections on "
                  << db.url() << std::endl;
    } catch (std::exception const& e) {
        std::cerr << e.what() << "\n";
        return 69;
    }

    char dir_template[] = "/tmp/sqlock-demo.XXXXXX";
    std::string dir = ::mkdtemp(dir_template);
    std::ofstream(dir + "/counter") << 0 << '\n';

    for (int i = 0; i < processes; ++i) {
        pid_t pid = ::fork();
        if (pid == 0) {
            int rc = 1;
            try {
                rc = worker(url, dir, i, iterations);
            } catch (std::exception const& e) {
                std::cerr << "worker " << i << ": " << e.what() << "\n";
            }
            std::fflush(stdout);
            ::_exit(rc);
        }
    }
    int failed = 0;
    for (int i = 0; i < processes; ++i) {
        int status = 0;
        ::wait(&status);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
    }
    long counter = read_counter(dir + "/counter");
    long expected = static_cast<long>(processes) * iterations;
    std::filesystem::remove_all(dir);
    std::cout << "counter = " << counter << " (expected " << expected << "), workers failed: " << failed << "\n";
    if (counter != expected || failed != 0) {
        std::cout << "FAILED: the critical section was not exclusive\n";
        return 1;
    }
    std::cout << "OK: only one process was ever inside the critical section\n";
    return 0;
}
