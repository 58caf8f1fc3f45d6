// SQLite: the engine driver: session set-up, error classification, the idle-socket read.
#include "dialect/sqlite/sqlite.hpp"

#include "dialect/sqlite/bell.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <iostream>
#include <stdexcept>
#include <utility>

namespace sqlock::detail::sqlite_engine {
namespace {

// Waits on inotify for a release to touch the bell file (its inode's attributes or
// contents). The ring says no name: every waiter of the store tries again. The watch is
// armed before the constructor returns, so a waiter's mark never precedes it; an eventfd
// wakes poll() for a prompt shutdown. A bell refused (bell.hpp) is looked at again at the
// backoff, and the dialect's listening() is false meanwhile: its waiters mark nothing and poll.
class bell_listener final : public release_listener {
public:
    bell_listener(sqlite_dialect const& dialect, std::string path, std::string database, int inotify, bool armed,
                  dialect::notify_fn on_notify)
        : dialect_(dialect),
          path_(std::move(path)),
          database_(std::move(database)),
          inotify_(inotify),
          on_notify_(std::move(on_notify)),
          wake_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)),
          thread_([this, armed](std::stop_token stop) { run(stop, armed); }) {}

    ~bell_listener() override {
        thread_.request_stop();
        std::uint64_t one = 1;
        (void)!::write(wake_, &one, sizeof one);
        thread_.join();
        ::close(wake_);
        ::close(inotify_);
    }

    // Creates the bell if it is missing, checks it (never blocking, never through a link) and
    // watches the inode it checked.
    static bell_file arm(int inotify, std::string const& path, std::string const& database) {
        auto bell = open_bell(path, database, true);
        if (bell.state != bell_state::usable) return bell;
        struct stat opened {};
        struct stat named {};
        (void)::fstat(bell.fd, &opened);
        int const wd = ::inotify_add_watch(inotify, path.c_str(),
                                           IN_ATTRIB | IN_MODIFY | IN_CLOSE_WRITE | IN_DELETE_SELF | IN_MOVE_SELF |
                                               IN_DONT_FOLLOW);
        bool const same = wd >= 0 && ::lstat(path.c_str(), &named) == 0 && named.st_dev == opened.st_dev &&
                          named.st_ino == opened.st_ino;
        ::close(std::exchange(bell.fd, -1));
        if (!same) {  // no watch left, or replaced meanwhile: try again later
            if (wd >= 0) (void)::inotify_rm_watch(inotify, wd);
            bell.state = bell_state::unusable;
            bell.why = wd < 0 ? "inotify_add_watch failed" : "it was replaced while it was opened";
        }
        return bell;
    }

private:
    void run(std::stop_token const& stop, bool armed) {
        auto retry = std::chrono::milliseconds(100);
        alignas(inotify_event) char buf[4096];
        while (!stop.stop_requested()) {
            if (!armed) {
                auto const bell = arm(inotify_, path_, database_);
                if (bell.state == bell_state::refused) dialect_.bell_refused(bell.why);
                if (!(armed = bell.state == bell_state::usable)) {
                    sleep_unless_woken(retry);
                    retry = std::min(retry * 2, std::chrono::milliseconds(5000));
                    continue;
                }
                retry = std::chrono::milliseconds(100);
                dialect_.set_listening(true);
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
                    dialect_.set_listening(false);
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

    sqlite_dialect const& dialect_;
    std::string path_;
    std::string database_;
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
    auto const bell = bell_listener::arm(inotify, bell_path_, path_);
    if (bell.state == bell_state::refused) {
        bell_refused(bell.why);                     // waiters poll; the listener looks again at its backoff
    } else if (bell.state != bell_state::usable) {  // a directory we may not write: waiters poll
        ::close(inotify);
        return nullptr;
    }
    bool const armed = bell.state == bell_state::usable;
    set_listening(armed);
    return std::make_unique<bell_listener>(*this, bell_path_, path_, inotify, armed, std::move(on_notify));
}

void sqlite_dialect::ring() const noexcept {
    if (bell_path_.empty()) return;
    auto const bell = open_bell(bell_path_, path_, false);
    if (bell.state == bell_state::refused) bell_refused(bell.why);
    if (bell.state != bell_state::usable) return;
    (void)::futimens(bell.fd, nullptr);  // the inode checked, never a link's target
    ::close(bell.fd);
}

void sqlite_dialect::bell_refused(std::string const& why) const noexcept {
    if (refusal_said_.exchange(true)) return;
    try {
        std::clog << "sqlock: warning: the SQLite bell " << bell_path_ << " is refused: " << why
                  << ". This store's waiters are not woken by releases and poll at their backoff instead; "
                  << bell_fix(bell_path_) << std::endl;
    } catch (...) {  // a log line must not fail a lock call
    }
}

std::string sqlite_dialect::connect_string(url_parts const& url) const {
    auto sync = url.params.find("synchronous");
    synchronous_ = sync == url.params.end() ? "full" : sync->second;
    relax_release_ = synchronous_ != "normal" && synchronous_ != "off" && synchronous_ != "1" && synchronous_ != "0";
    durable_sql_ = "PRAGMA synchronous = " + synchronous_;
    path_ = url.path;
    bell_path_ = bell_path_of(path_, prefix_);
    return "db=\"" + url.path + "\"";
}

void sqlite_dialect::read_server_answer(soci::session& s, std::string& version, std::string&) const {
    s << "SELECT sqlite_version()", soci::into(version);
}

void sqlite_dialect::open(soci::session& s, std::string const& connect_string) const {
    // SQLite opens these beside the database itself, without O_NONBLOCK: a FIFO planted at -journal
    // (its hot-journal check reads it) would block every open for ever. Anything but a regular file
    // there is refused before SQLite looks (SQLite refuses some of them itself, less clearly).
    for (char const* suffix : {"-journal", "-wal", "-shm"}) {
        if (bell_path_.empty()) break;  // no file of its own
        struct stat st {};
        auto const side = path_ + suffix;
        if (::lstat(side.c_str(), &st) != 0 || S_ISREG(st.st_mode)) continue;
        throw std::runtime_error("the file " + side + " beside the database is " +
                                 (S_ISFIFO(st.st_mode)  ? "a FIFO"
                                  : S_ISLNK(st.st_mode) ? "a symbolic link"
                                  : S_ISDIR(st.st_mode) ? "a directory"
                                                        : "not a regular file") +
                                 ", where SQLite keeps its journal or shared memory (someone who may write the "
                                 "directory put it there?): remove it, and let only the database's users write " +
                                 "the directory");
    }
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
