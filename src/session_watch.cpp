#include "detail/session_watch.hpp"

#include "detail/dialect.hpp"

#include "detail/process.hpp"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <array>
#include <condition_variable>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

namespace sqlock::detail {

// The watched sockets are in an epoll set that the callers change themselves
// (epoll_ctl while the thread waits), so holding, renewing and releasing a row
// lock never wakes the thread: it wakes only when a socket says something, or
// to stop.
struct session_watch::state {
    explicit state(dialect const& d)
        : dialect_(&d), epoll_fd(::epoll_create1(EPOLL_CLOEXEC)), wake_fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.u64 = 0;  // no ticket is 0
        if (epoll_fd >= 0 && wake_fd >= 0 && ::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, wake_fd, &ev) != 0) {
            ::close(epoll_fd);
            epoll_fd = -1;
        }
    }
    ~state() {
        if (wake_fd >= 0) ::close(wake_fd);
        if (epoll_fd >= 0) ::close(epoll_fd);
    }
    state(state const&) = delete;
    state& operator=(state const&) = delete;

    struct entry {
        soci::session* session;
        int fd;
        ended_fn ended;
        bool paused = false;   // a statement is in flight
        bool reading = false;  // the thread reads its socket now
    };

    [[nodiscard]] bool usable() const noexcept { return epoll_fd >= 0 && wake_fd >= 0; }

    void wake() const noexcept {
        std::uint64_t one = 1;
        if (wake_fd >= 0) (void)!::write(wake_fd, &one, sizeof one);
    }

    // Under the mutex. `reads`: data too, not only hang-ups; none: out of the set.
    bool listen(std::uint64_t ticket, int fd, int op, bool reads) const noexcept {
        epoll_event ev{};
        ev.events = EPOLLRDHUP | (reads ? EPOLLIN : 0U);
        ev.data.u64 = ticket;
        return ::epoll_ctl(epoll_fd, op, fd, &ev) == 0;
    }
    void ignore(int fd) const noexcept { (void)::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, fd, nullptr); }

    void run();

    dialect const* dialect_;
    int epoll_fd;
    int wake_fd;
    std::mutex mutex;
    std::condition_variable read_done;
    std::map<std::uint64_t, entry> entries;
    std::uint64_t next = 1;
    bool stop = false;
    std::thread::id thread_id;
};

void session_watch::state::run() {
    std::array<epoll_event, 64> events{};
    std::vector<std::pair<std::uint64_t, bool>> to_read;  // ticket, hung up
    std::vector<std::pair<soci::session*, bool>> sessions;
    std::vector<dialect::idle_news> news;
    std::vector<std::pair<ended_fn, std::string>> calls;
    std::unique_lock lock(mutex);
    while (!stop) {
        lock.unlock();
        int const n = ::epoll_wait(epoll_fd, events.data(), static_cast<int>(events.size()), -1);
        lock.lock();
        to_read.clear();
        sessions.clear();
        for (int i = 0; i < n; ++i) {
            auto const ticket = events[static_cast<std::size_t>(i)].data.u64;
            if (ticket == 0) {
                std::uint64_t drained = 0;
                (void)!::read(wake_fd, &drained, sizeof drained);
                continue;
            }
            auto it = entries.find(ticket);
            // Unwatched or paused since the wait began: the event belongs to the statement.
            if (it == entries.end() || it->second.paused) continue;
            it->second.reading = true;
            bool const hung_up = (events[static_cast<std::size_t>(i)].events & (EPOLLHUP | EPOLLERR | EPOLLRDHUP)) != 0;
            to_read.emplace_back(ticket, hung_up);
            sessions.emplace_back(it->second.session, hung_up);
        }
        if (to_read.empty()) continue;
        lock.unlock();
        news.clear();
        for (auto const& [session, hung_up] : sessions) {
            try {
                news.push_back(dialect_->read_idle(*session, hung_up));
            } catch (...) {
                news.push_back({});  // nothing learnt: watched on
            }
        }
        lock.lock();
        for (std::size_t i = 0; i < to_read.size(); ++i) {
            auto it = entries.find(to_read[i].first);
            if (it == entries.end()) continue;
            if (news[i].ended) {
                ignore(it->second.fd);  // before `ended` closes the socket
                calls.emplace_back(std::move(it->second.ended), std::move(news[i].why));
                entries.erase(it);
            } else {
                it->second.reading = false;
                // Data that cannot be read here would wake the wait again at once: hang-ups only.
                if (!news[i].watch_reads) (void)listen(it->first, it->second.fd, EPOLL_CTL_MOD, false);
            }
        }
        read_done.notify_all();
        if (calls.empty()) continue;
        lock.unlock();
        for (auto& [ended, why] : calls) {
            try {
                ended(why);
            } catch (...) {  // a hook's failure must not end the watch of the others
            }
        }
        // May drop the last reference to the store that owns this watch: from
        // here on only this state is used, and `stop` ends the loop.
        calls.clear();
        lock.lock();
    }
}

session_watch::session_watch(dialect const& d) : state_(std::make_shared<state>(d)), pid_(::getpid()) {}

session_watch::~session_watch() {
    if (!thread_.joinable()) return;
    if (::getpid() != pid_) {
        // A forked child: the thread exists only in the parent, and the wake-up
        // descriptor is shared with it. Forget the thread without touching it.
        (void)new std::thread(std::move(thread_));
        return;
    }
    {
        std::lock_guard lock(state_->mutex);
        state_->stop = true;
    }
    state_->wake();
    // The thread's own `ended` call may have dropped the last reference to the store.
    if (thread_.get_id() == std::this_thread::get_id()) thread_.detach();
    else thread_.join();
}

std::uint64_t session_watch::watch(soci::session& s, ended_fn ended) {
    int const fd = state_->dialect_->socket_of(s);
    // A forked child has no thread to watch for it (the set is the parent's too).
    if (fd < 0 || !state_->usable() || process_id() != pid_) return 0;
    std::lock_guard lock(state_->mutex);
    std::uint64_t const ticket = state_->next++;
    if (!state_->listen(ticket, fd, EPOLL_CTL_ADD, true)) return 0;
    state_->entries.emplace(ticket, state::entry{&s, fd, std::move(ended)});
    if (!thread_.joinable()) {
        thread_ = std::thread([st = state_] { st->run(); });
        state_->thread_id = thread_.get_id();
    }
    return ticket;
}

void session_watch::unwatch(std::uint64_t ticket) noexcept {
    if (ticket == 0) return;
    std::unique_lock lock(state_->mutex);
    if (std::this_thread::get_id() != state_->thread_id)
        state_->read_done.wait(lock, [&] {
            auto it = state_->entries.find(ticket);
            return it == state_->entries.end() || !it->second.reading;
        });
    auto it = state_->entries.find(ticket);
    if (it == state_->entries.end()) return;
    if (!it->second.paused) state_->ignore(it->second.fd);  // the socket may be closed next
    state_->entries.erase(it);
}

void session_watch::pause(std::uint64_t ticket) noexcept {
    if (ticket == 0) return;
    std::unique_lock lock(state_->mutex);
    if (std::this_thread::get_id() == state_->thread_id) return;
    state_->read_done.wait(lock, [&] {
        auto it = state_->entries.find(ticket);
        return it == state_->entries.end() || !it->second.reading;
    });
    if (auto it = state_->entries.find(ticket); it != state_->entries.end() && !it->second.paused) {
        it->second.paused = true;
        state_->ignore(it->second.fd);
    }
}

void session_watch::resume(std::uint64_t ticket) noexcept {
    if (ticket == 0) return;
    std::lock_guard lock(state_->mutex);
    auto it = state_->entries.find(ticket);
    if (it == state_->entries.end() || !it->second.paused) return;
    it->second.paused = false;
    (void)state_->listen(ticket, it->second.fd, EPOLL_CTL_ADD, true);
}

}  // namespace sqlock::detail
