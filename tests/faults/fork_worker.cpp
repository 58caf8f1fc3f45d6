// sqlock tests — the process that forks for tests/faults/fork_suite.cpp (issue 18, items 1 and 2).
//
//   sqlock_fork_worker grant <url> <name> <try|wait> <own|shared-owner>
//       Takes and releases a "startup" lock, then forks. The child opens a store
//       and a table locker of its own and acquires <name>; once it answered, the
//       parent does the same through a new store ("try": try_acquire, "wait":
//       acquire with a 1 s wait). The child holds what it got until the parent
//       answered. Prints "child granted <token>" or "child busy", and the same
//       for the parent; exits 0 unless something failed. The child's row stays
//       until its TTL (30 s). "shared-owner": both
//       lockers carry the same locker_options::owner.
//   sqlock_fork_worker survive <url> <row-url> <table-name> <row-name> <return|exit>
//       Holds a table lock (on <url>) and a row lock (on <row-url>: SQLite's
//       row lock takes the whole file) with TTL 3 s, renewed, and forks; the child
//       ends by returning from main ("return") or calling exit() ("exit"), so its
//       copies of the store, lockers and leases are destroyed. The parent waits
//       for it, prints "child <how it ended>", then checks that both leases are
//       held, renew, and that another store can take neither; prints "parent ok"
//       and exits 0, or says what failed and exits 1.
#include "sanitized_fork.hpp"

#include <sqlock/sqlock.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <thread>

namespace {

using namespace std::chrono_literals;

std::string ended(int st) {
    if (WIFEXITED(st)) return "exited " + std::to_string(WEXITSTATUS(st));
    if (WIFSIGNALED(st)) return "killed by signal " + std::to_string(WTERMSIG(st));
    return "status " + std::to_string(st);
}

void say(std::string const& line) {
    std::cout << line << std::endl;  // flushed: the other process writes to the same file
}

std::string answer(std::optional<sqlock::lease> const& l) {
    return l ? "granted " + std::to_string(l->token()) : "busy";
}

bool read_byte(int fd) {
    char c = 0;
    return ::read(fd, &c, 1) == 1;
}

void write_byte(int fd) { (void)!::write(fd, "x", 1); }

int grant(std::string const& url, std::string const& name, bool wait, bool shared_owner) {
    sqlock::locker_options const opts{.ttl = 30s, .owner = shared_owner ? "fork-test-owner" : ""};
    auto take = [&](sqlock::locker& locks) -> std::optional<sqlock::lease> {
        if (!wait) return locks.try_acquire(name);
        try {
            return locks.acquire(name, 1s);
        } catch (sqlock::timeout const&) {
            return std::nullopt;
        }
    };
    sqlock::store first(url, {.create_schema = true});
    sqlock::locker startup_locks = sqlock::table_locker(first, opts);
    // One attempt before the fork: a generator the child copies has moved.
    if (auto startup = startup_locks.try_acquire(name + "-startup")) startup->release();

    int to_parent[2], to_child[2];
    if (::pipe(to_parent) != 0 || ::pipe(to_child) != 0) return 2;
    // Under ASan, the threads the startup lease started must be out of the allocator (sanitized_fork.hpp).
    if (!sqlock_test::settle_before_fork(std::chrono::seconds(10))) {
        say("parent: its threads did not settle within 10 s (sanitized build)");
        return 2;
    }
    std::fflush(nullptr);
    pid_t const pid = ::fork();
    if (pid < 0) return 2;
    if (pid == 0) {
        int code = 0;
        try {
            sqlock::store own(url, {.create_schema = true});
            sqlock::locker locks = sqlock::table_locker(own, opts);
            auto got = take(locks);
            say("child " + answer(got));
            write_byte(to_parent[1]);
            (void)read_byte(to_child[0]);  // hold it until the parent has answered
            std::fflush(nullptr);
            ::_exit(0);  // the row stays (for the test to read) until its TTL
        } catch (std::exception const& e) {
            say(std::string("child error ") + e.what());
            write_byte(to_parent[1]);
            code = 1;
        }
        std::fflush(nullptr);
        ::_exit(code);  // the parent's objects stay untouched (item 2 is tested on its own)
    }
    int code = 0;
    (void)read_byte(to_parent[0]);
    try {
        sqlock::store second(url, {.create_schema = true});
        sqlock::locker locks = sqlock::table_locker(second, opts);
        auto got = take(locks);
        say("parent " + answer(got));
        write_byte(to_child[1]);
        if (got) got->release();
    } catch (std::exception const& e) {
        say(std::string("parent error ") + e.what());
        write_byte(to_child[1]);
        code = 1;
    }
    int st = 0;
    ::waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        say("child " + ended(st));
        code = 1;
    }
    return code;
}

/// What the child of `survive` destroys: the parent's store, lockers and leases.
struct holdings {
    sqlock::store db, row_db;
    sqlock::locker table_locks;
    sqlock::locker row_locks;
    std::optional<sqlock::lease> table, row;
    holdings(std::string const& url, std::string const& row_url, std::string const& table_name,
             std::string const& row_name)
        : db(url, {.create_schema = true}),
          row_db(row_url, {.create_schema = true}),
          table_locks(sqlock::table_locker(db, {.ttl = 3s})),
          row_locks(sqlock::row_locker(row_db, {.ttl = 3s})),
          table(table_locks.try_acquire(table_name)),
          row(row_locks.try_acquire(row_name)) {}
};

std::optional<holdings> kept;  // "exit": destroyed by exit() in the child

int survive(std::string const& url, std::string const& row_url, std::string const& table_name,
            std::string const& row_name, bool by_exit) {
    std::optional<holdings> local;
    auto& h = by_exit ? kept : local;
    h.emplace(url, row_url, table_name, row_name);
    if (!h->table || !h->row) {
        say("parent could not take its locks");
        return 1;
    }
    // Under ASan, the threads the holdings started must be out of the allocator (sanitized_fork.hpp).
    if (!sqlock_test::settle_before_fork(std::chrono::seconds(10))) {
        say("parent: its threads did not settle within 10 s (sanitized build)");
        return 1;
    }
    std::fflush(nullptr);
    pid_t const pid = ::fork();
    if (pid < 0) return 2;
    if (pid == 0) {
        if (by_exit) std::exit(0);
        return 0;  // through main: `local` is destroyed on the way
    }
    int st = 0;
    bool exited = false;
    for (int i = 0; i < 3000 && !exited; ++i) {  // 30 s
        exited = ::waitpid(pid, &st, WNOHANG) == pid;
        if (!exited) std::this_thread::sleep_for(10ms);
    }
    if (!exited) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, &st, 0);
    }
    say("child " + (exited ? ended(st) : "still running after 30 s (killed)"));
    std::string failed;
    auto check = [&](bool ok, std::string const& what) {
        if (!ok) failed += (failed.empty() ? "" : "; ") + what;
    };
    try {
        for (int round = 0; round < 2; ++round) {
            check(h->table->state() == sqlock::lease_state::held, "the table lease is not held");
            check(h->row->state() == sqlock::lease_state::held, "the row lease is not held");
            try {
                h->table->renew();
            } catch (std::exception const& e) {
                check(false, std::string("the table lease did not renew: ") + e.what());
            }
            try {
                h->row->renew();
            } catch (std::exception const& e) {
                check(false, std::string("the row lease did not renew: ") + e.what());
            }
            sqlock::store other(url, {.lock_wait_timeout = 200ms});
            check(!sqlock::table_locker(other, {.ttl = 10s}).try_acquire(table_name),
                  "another store took the table lock");
            sqlock::store other_row(row_url, {.lock_wait_timeout = 200ms});
            check(!sqlock::row_locker(other_row, {.ttl = 10s}).try_acquire(row_name),
                  "another store took the row lock");
        }
        h->table->release();
        h->row->release();
    } catch (std::exception const& e) {
        check(false, std::string("error: ") + e.what());
    }
    say(failed.empty() ? "parent ok" : "parent failed: " + failed);
    return failed.empty() && exited && WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
    std::string const mode = argc > 1 ? argv[1] : "";
    try {
        if (mode == "grant" && argc == 6)
            return grant(argv[2], argv[3], std::string(argv[4]) == "wait", std::string(argv[5]) == "shared-owner");
        if (mode == "survive" && argc == 7)
            return survive(argv[2], argv[3], argv[4], argv[5], std::string(argv[6]) == "exit");
    } catch (std::exception const& e) {
        std::cerr << "sqlock_fork_worker: " << e.what() << "\n";
        return 2;
    }
    std::cerr << "usage: sqlock_fork_worker grant <url> <name> <try|wait> <own|shared-owner>\n"
                 "       sqlock_fork_worker survive <url> <row-url> <table-name> <row-name> <return|exit>\n";
    return 2;
}
