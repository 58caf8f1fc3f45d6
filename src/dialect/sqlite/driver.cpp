// SQLite: the engine driver: session set-up, error classification, the idle-socket read.
#include "dialect/sqlite/sqlite.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

namespace sqlock::detail::sqlite_engine {
namespace {

// Waits on inotify for a release to touch the bell file (its inode's attributes or
// contents). The ring says no name: every waiter of the store tries again. The watch is
// armed before the constructor returns, so a waiter's mark never precedes it; an eventfd
// wakes poll() for a prompt shutdown.
class bell_listener final : public release_listener {
public:
    bell_listener(std::string path, int inotify, dialect::notify_fn on_notify)
        : path_(std::move(path)),
          inotify_(inotify),
          on_notify_(std::move(on_notify)),
          wake_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)),
          thread_([this](std::stop_token stop) { run(stop); }) {}

    ~bell_listener() override {
        thread_.request_stop();
        std::uint64_t one = 1;
        (void)!::write(wake_, &one, sizeof one);
        thread_.join();
        ::close(wake_);
        ::close(inotify_);
    }

    // Creates the bell if it is missing and watches it; false when it cannot.
    static bool arm(int inotify, std::string const& path) {
        int const fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0666);
        if (fd < 0) return false;
        ::close(fd);
        return ::inotify_add_watch(inotify, path.c_str(),
                                   IN_ATTRIB | IN_MODIFY | IN_CLOSE_WRITE | IN_DELETE_SELF | IN_MOVE_SELF) >= 0;
    }

private:
    void run(std::stop_token const& stop) {
        auto retry = std::chrono::milliseconds(100);
        bool armed = true;
        alignas(inotify_event) char buf[4096];
        while (!stop.stop_requested()) {
            if (!armed) {
                if (!(armed = arm(inotify_, path_))) {
                    sleep_unless_woken(retry);
                    retry = std::min(retry * 2, std::chrono::milliseconds(5000));
                    continue;
                }
                retry = std::chrono::milliseconds(100);
                on_notify_("", false);  // rings while the file was gone reached nobody
            }
            pollfd fds[2] = {{inotify_, POLLIN, 0}, {wake_, POLLIN, 0}};
            if (::poll(fds, 2, -1) < 0 && errno != EINTR) return;
            if (fds[0].revents == 0) continue;
            auto const n = ::read(inotify_, buf, sizeof buf);
            if (n <= 0) continue;
            bool rang = false;
            for (char const* at = buf; at < buf + n;) {
                auto const* e = reinterpret_cast<inotify_event const*>(at);
                if ((e->mask & (IN_DELETE_SELF | IN_MOVE_SELF)) != 0) {
                    (void)::inotify_rm_watch(inotify_, e->wd);  // moved: stop watching the old inode
                    armed = false;
                } else if ((e->mask & (IN_ATTRIB | IN_MODIFY | IN_CLOSE_WRITE)) != 0) {
                    rang = true;
                }
                at += sizeof(inotify_event) + e->len;
            }
            if (rang) on_notify_("", true);
        }
    }

    void sleep_unless_woken(std::chrono::milliseconds d) {
        pollfd fd{wake_, POLLIN, 0};
        ::poll(&fd, 1, static_cast<int>(d.count()));
    }

    std::string path_;
    int inotify_;
    dialect::notify_fn on_notify_;
    int wake_;
    std::jthread thread_;
};

}  // namespace

std::unique_ptr<release_listener> sqlite_dialect::listen(std::string const&, notify_fn on_notify) const {
    if (bell_path_.empty()) return nullptr;
    int const inotify = ::inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
    if (inotify < 0) return nullptr;
    if (!bell_listener::arm(inotify, bell_path_)) {  // a directory we may not write: waiters poll
        ::close(inotify);
        return nullptr;
    }
    return std::make_unique<bell_listener>(bell_path_, inotify, std::move(on_notify));
}

std::string sqlite_dialect::connect_string(url_parts const& url) const {
    auto sync = url.params.find("synchronous");
    synchronous_ = sync == url.params.end() ? "full" : sync->second;
    relax_release_ = synchronous_ != "normal" && synchronous_ != "off" && synchronous_ != "1" && synchronous_ != "0";
    durable_sql_ = "PRAGMA synchronous = " + synchronous_;
    path_ = url.path;
    bool const own_file = !path_.empty() && path_ != ":memory:" && !path_.starts_with("file:");
    bell_path_ = own_file ? path_ + "-" + prefix_ + "-bell" : std::string{};
    return "db=\"" + url.path + "\"";
}

void sqlite_dialect::read_server_answer(soci::session& s, std::string& version, std::string&) const {
    s << "SELECT sqlite_version()", soci::into(version);
}

void sqlite_dialect::open(soci::session& s, std::string const& connect_string) const {
    s.open(*soci::factory_sqlite3(), connect_string);
    (void)learn_server(s);
    s << "PRAGMA busy_timeout = " + std::to_string(options_.lock_wait_timeout.count());
    // Switching to WAL needs the file to itself for a moment; busy_timeout
    // does not always cover it, so retry SQLITE_BUSY within the same bound.
    auto const until = std::chrono::steady_clock::now() + options_.lock_wait_timeout;
    for (;;) {
        try {
            std::string mode;
            s << "PRAGMA journal_mode = WAL", soci::into(mode);
            // The pragma answers with the mode it could set: an in-memory database
            // or a file system without shared memory stays in another mode.
            if (mode != "wal")
                throw usage_error("sqlock: the SQLite database " + path_ +
                                  " cannot use WAL mode (journal_mode "
                                  "stayed '" +
                                  mode +
                                  "'): put the file on a local file system that supports "
                                  "shared memory (not an in-memory database or a network share)");
            s << "PRAGMA synchronous = " + synchronous_;
            return;
        } catch (soci::soci_error const& e) {
            auto* lite = dynamic_cast<soci::sqlite3_soci_error const*>(&e);
            bool busy = lite != nullptr && ((lite->result() & 0xff) == 5 || (lite->result() & 0xff) == 6);
            if (!busy || std::chrono::steady_clock::now() >= until) throw;
            std::this_thread::sleep_for(std::chrono::milliseconds(5));  // busy: wait a moment, then retry
        }
    }
}

void sqlite_dialect::set_engine_wait(soci::session& s, std::chrono::milliseconds wait) const {
    auto* backend = static_cast<soci::sqlite3_session_backend*>(s.get_backend());
    if (backend != nullptr && backend->conn_ != nullptr)
        sqlite3_busy_timeout(backend->conn_, static_cast<int>(std::clamp<long long>(wait.count(), 0, INT32_MAX)));
}

failure sqlite_dialect::classify(soci::soci_error const& e, soci::session&) const {
    auto* lite = dynamic_cast<soci::sqlite3_soci_error const*>(&e);
    std::string_view what = e.what();
    if (what.find("no such table") != std::string_view::npos) return failure::schema;
    if (lite == nullptr) return failure::other;
    switch (lite->result() & 0xff) {
        case 5:  // SQLITE_BUSY
        case 6:  // SQLITE_LOCKED
            return failure::transient;
        case 14:  // SQLITE_CANTOPEN
            return failure::connection;
        case 8:  // SQLITE_READONLY: the file (or its directory) may not be written
            return failure::read_only;
        case 23:  // SQLITE_AUTH: an authorizer refused the statement
            return failure::permission;
        default: return failure::other;
    }
}

std::string sqlite_dialect::native_code(soci::soci_error const& e) const {
    if (auto* lite = dynamic_cast<soci::sqlite3_soci_error const*>(&e)) return std::to_string(lite->result());
    return {};
}

}  // namespace sqlock::detail::sqlite_engine
