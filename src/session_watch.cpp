#include "detail/session_watch.hpp"

#include "detail/dialect.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <condition_variable>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

namespace sqlock::detail {

struct session_watch::state {
    explicit state(dialect const& d) : dialect_(&d), wake_fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}
    ~state() {
        if (wake_fd >= 0) ::close(wake_fd);
    }
    state(state const&) = delete;
    state& operator=(state const&) = delete;

    struct entry {
        soci::session* session;
        int fd;
        ended_fn ended;
        bool paused = false;   // a statement is in flight
        bool reading = false;  // the thread reads its socket now
        bool reads = true;     // poll for data too, not only hang-ups
    };

    void wake() const noexcept {
        std::uint64_t one = 1;
        if (wake_fd >= 0) (void)!::write(wake_fd, &one, sizeof one);
    }

    void run();

    dialect const* dialect_;
    int wake_fd;
    std::mutex mutex;
    std::condition_variable read_done;
    std::map<std::uint64_t, entry> entries;
    std::uint64_t next = 1;
    bool stop = false;
    std::thread::id thread_id;
};

void session_watch::state::run() {
    std::vector<pollfd> fds;
    std::vector<std::uint64_t> tickets;
    std::vector<std::pair<std::uint64_t, bool>> to_read;  // ticket, hung up
    std::vector<std::pair<soci::session*, bool>> sessions;
    std::vector<dialect::idle_news> news;
    std::vector<std::pair<ended_fn, std::string>> calls;
    std::unique_lock lock(mutex);
    while (!stop) {
        fds.assign(1, pollfd{wake_fd, POLLIN, 0});
        tickets.assign(1, 0);
        for (auto const& [ticket, e] : entries) {
            if (e.paused) continue;
            fds.push_back(pollfd{e.fd, static_cast<short>(POLLRDHUP | (e.reads ? POLLIN : 0)), 0});
            tickets.push_back(ticket);
        }
        lock.unlock();
        int const n = ::poll(fds.data(), fds.size(), -1);
        if (fds[0].revents != 0) {
            std::uint64_t drained = 0;
            (void)!::read(wake_fd, &drained, sizeof drained);
        }
        lock.lock();
        if (n <= 0) continue;
        to_read.clear();
        sessions.clear();
        for (std::size_t i = 1; i < fds.size(); ++i) {
            if (fds[i].revents == 0) continue;
            auto it = entries.find(tickets[i]);
            // Paused since the poll began: the revents belong to the statement.
            if (it == entries.end() || it->second.paused) continue;
            it->second.reading = true;
            bool const hung_up = (fds[i].revents & (POLLHUP | POLLERR | POLLRDHUP | POLLNVAL)) != 0;
            to_read.emplace_back(tickets[i], hung_up);
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
                calls.emplace_back(std::move(it->second.ended), std::move(news[i].why));
                entries.erase(it);
            } else {
                it->second.reading = false;
                it->second.reads = news[i].watch_reads;
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
    if (fd < 0 || state_->wake_fd < 0) return 0;
    std::uint64_t ticket = 0;
    {
        std::lock_guard lock(state_->mutex);
        ticket = state_->next++;
        state_->entries.emplace(ticket, state::entry{&s, fd, std::move(ended)});
        if (!thread_.joinable()) {
            thread_ = std::thread([st = state_] { st->run(); });
            state_->thread_id = thread_.get_id();
        }
    }
    state_->wake();
    return ticket;
}

void session_watch::unwatch(std::uint64_t ticket) noexcept {
    if (ticket == 0) return;
    {
        std::unique_lock lock(state_->mutex);
        if (std::this_thread::get_id() != state_->thread_id)
            state_->read_done.wait(lock, [&] {
                auto it = state_->entries.find(ticket);
                return it == state_->entries.end() || !it->second.reading;
            });
        if (state_->entries.erase(ticket) == 0) return;
    }
    state_->wake();  // the socket may be closed next: out of the poll set first
}

void session_watch::pause(std::uint64_t ticket) noexcept {
    if (ticket == 0) return;
    std::unique_lock lock(state_->mutex);
    if (std::this_thread::get_id() == state_->thread_id) return;
    state_->read_done.wait(lock, [&] {
        auto it = state_->entries.find(ticket);
        return it == state_->entries.end() || !it->second.reading;
    });
    if (auto it = state_->entries.find(ticket); it != state_->entries.end()) it->second.paused = true;
}

void session_watch::resume(std::uint64_t ticket) noexcept {
    if (ticket == 0) return;
    {
        std::lock_guard lock(state_->mutex);
        auto it = state_->entries.find(ticket);
        if (it == state_->entries.end()) return;
        it->second.paused = false;
        it->second.reads = true;
    }
    state_->wake();
}

}  // namespace sqlock::detail
