// sqlock tests — a TCP proxy on 127.0.0.1 that can cut a database server off.
//
//     fault_proxy proxy(server_url);                        // listens on an ephemeral port
//     sqlock::store db{proxy.proxied_url(server_url)};      // connects through it
//     proxy.block();    // every forwarded connection is closed, new ones are closed at once
//     proxy.unblock();  // new connections are forwarded again
//     proxy.stall();    // nothing is relayed any more, every connection stays open (a hung server)
//     proxy.resume();   // relay again
//     proxy.delay(200ms);  // hold every relayed chunk 200 ms before forwarding it (latency)
//     proxy.blackhole();   // accept, read and drop everything, never answer, never close
//     proxy.swallow_replies();  // forward requests, drop the server's answers, keep connections open
//     proxy.reset_next_reply(); // the next answer of the server is dropped and both ends get an RST
//     proxy.reset();       // RST every forwarded connection now (mid-stream)
//     proxy.hang_new_connections();  // new connections are accepted and never answered; open ones relay
//     proxy.restore();     // end blackhole/swallow/hang_new; connections that lost bytes get an RST
//     proxy.record_requests();  // keep every byte the clients send from now on; proxy.requests() gives them
//
// One thread accepts, one thread per connection relays bytes both ways. Only
// the relay thread of a connection closes its sockets (under the mutex), so
// block() never touches a descriptor that was closed and reused meanwhile.
// Each connection has an eventfd the other threads use to make its relay
// thread look at the modes again (reset(), restore()).
#pragma once

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <arpa/inet.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <list>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

namespace sqlock_test {

/// Where the host[:port] of a server URL's authority starts and ends (after
/// any user:password@, before the path or query).
inline std::pair<std::size_t, std::size_t> host_port_span(std::string const& url) {
    auto sep = url.find("://");
    if (sep == std::string::npos) throw std::invalid_argument("not a server URL: " + url);
    auto const start = sep + 3;
    auto end = url.find_first_of("/?", start);
    if (end == std::string::npos) end = url.size();
    auto at = url.rfind('@', end);
    auto const host_start = (at != std::string::npos && at >= start) ? at + 1 : start;
    return {host_start, end};
}

/// `url` with the host:port of its authority replaced (user, password, path and
/// query are kept byte for byte).
inline std::string replace_host_port(std::string const& url, std::string const& host, int port) {
    auto const [host_start, end] = host_port_span(url);
    return url.substr(0, host_start) + host + ":" + std::to_string(port) + url.substr(end);
}

class fault_proxy {
public:
    /// A proxy to `target_host:target_port`, listening on 127.0.0.1 at an ephemeral port.
    fault_proxy(std::string target_host, int target_port)
        : target_host_(std::move(target_host)), target_port_(target_port) {
        listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (listen_fd_ < 0) throw std::runtime_error("fault_proxy: socket(): " + std::string(std::strerror(errno)));
        int one = 1;
        ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a.sin_port = 0;
        socklen_t len = sizeof a;
        if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
            ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0 || ::listen(listen_fd_, 64) != 0) {
            std::string why = std::strerror(errno);
            ::close(listen_fd_);
            throw std::runtime_error("fault_proxy: bind/listen on 127.0.0.1: " + why);
        }
        port_ = ntohs(a.sin_port);
        wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (wake_fd_ < 0) {
            ::close(listen_fd_);
            throw std::runtime_error("fault_proxy: eventfd(): " + std::string(std::strerror(errno)));
        }
        acceptor_ = std::thread([this] {
            ::pthread_setname_np(::pthread_self(), thread_name);
            accept_loop();
        });
    }

    /// The name of the proxy's threads (/proc/self/task/*/comm), so that a test counting the
    /// library's threads can leave them out.
    static constexpr char const* thread_name = "fault-proxy";

    /// A proxy to the host and port of a server URL (scheme://user:pass@host:port/db).
    static std::unique_ptr<fault_proxy> for_url(std::string const& url) {
        auto const [host_start, end] = host_port_span(url);
        std::string hp = url.substr(host_start, end - host_start);
        auto colon = hp.rfind(':');
        if (colon == std::string::npos) throw std::invalid_argument("fault_proxy: the URL has no port: " + url);
        return std::make_unique<fault_proxy>(hp.substr(0, colon), std::stoi(hp.substr(colon + 1)));
    }

    ~fault_proxy() {
        stopping_ = true;
        std::uint64_t one = 1;
        (void)!::write(wake_fd_, &one, sizeof one);
        acceptor_.join();
        {
            std::lock_guard lock(mutex_);
            for (auto& l : links_) cut(*l);
        }
        for (auto& l : links_) l->thread.join();
        ::close(listen_fd_);
        ::close(wake_fd_);
    }

    fault_proxy(fault_proxy const&) = delete;
    fault_proxy& operator=(fault_proxy const&) = delete;

    [[nodiscard]] int port() const noexcept { return port_; }

    /// `url` pointing at this proxy instead of the server.
    [[nodiscard]] std::string proxied_url(std::string const& url) const {
        return replace_host_port(url, "127.0.0.1", port_);
    }

    /// Close every forwarded connection, and close new ones as soon as they are accepted.
    void block() {
        std::lock_guard lock(mutex_);
        blocked_ = true;
        for (auto& l : links_) cut(*l);
    }

    /// Forward new connections again (connections closed by block() stay closed).
    void unblock() {
        std::lock_guard lock(mutex_);
        blocked_ = false;
    }

    /// Stop relaying bytes in both directions while keeping every connection open
    /// (accepted ones, and new ones too): a hung backend or a silent network. The
    /// client's socket stays healthy and its writes are accepted; its reads just
    /// never return. A chunk a relay thread had already read when stall() was
    /// called may still go through. block() and the destructor still close.
    void stall() { stalled_ = true; }

    /// Relay again; what the sockets held meanwhile goes through.
    void resume() { stalled_ = false; }

    /// Hold every relayed chunk, in either direction, for `latency` before
    /// forwarding it (zero: none). A relay thread serves both directions of its
    /// connection, so a request and its reply are each held once.
    void delay(std::chrono::milliseconds latency) { delay_ms_ = latency.count(); }

    /// A black hole: every connection, open or new, stays open and is read, and
    /// everything is dropped in both directions; nothing is ever answered or
    /// closed. New connections are accepted but never reach the server (it does
    /// not see them). The client's writes succeed; its reads never return. Unlike
    /// stall(), nothing is kept for later: restore() resets what lost bytes.
    void blackhole() { set_mode(mode::blackhole); }

    /// New connections are accepted and never answered (they never reach the
    /// server: a server too busy to start a session); the open ones relay as
    /// before. restore() ends it and resets the connections it held.
    void hang_new_connections() { hang_new_ = true; }

    /// Forward what clients send (the server executes it) and drop every answer
    /// of the server, keeping the connections open: a reply lost on the way back
    /// (an ambiguous outcome for the client). New connections too.
    void swallow_replies() { set_mode(mode::swallow); }

    /// The next chunk the server sends on any connection is dropped, and both
    /// ends of that connection get an RST: the request was executed, its answer
    /// is lost, the client sees "connection reset". One-shot.
    void reset_next_reply() { reset_next_reply_ = true; }

    /// Close every forwarded connection with an RST to both ends, now.
    void reset() {
        std::lock_guard lock(mutex_);
        for (auto& l : links_) request_reset(*l);
    }

    /// From now on, keep every byte the clients send that is forwarded to the server.
    void record_requests() noexcept { recording_ = true; }
    /// What record_requests() kept: statement texts are there as sent (the tests look for
    /// what a client said).
    [[nodiscard]] std::string requests() {
        std::lock_guard lock(requests_mutex_);
        return requests_;
    }

    /// End blackhole() and swallow_replies(): relay normally again. A connection
    /// that lost bytes meanwhile cannot carry on (its protocol stream has a hole),
    /// so it is closed with an RST to both ends, as is every connection the black
    /// hole accepted (it never reached the server); the others go on.
    void restore() {
        std::lock_guard lock(mutex_);
        mode_ = mode::relay;
        hang_new_ = false;
        for (auto& l : links_)
            if (l->lost_bytes.load() || l->server < 0) request_reset(*l);
    }

    /// Connections forwarded so far / closed at once because the proxy was blocked.
    [[nodiscard]] std::size_t forwarded() const noexcept { return forwarded_.load(); }
    [[nodiscard]] std::size_t refused() const noexcept { return refused_.load(); }
    /// Connections accepted into the black hole (never connected to the server).
    [[nodiscard]] std::size_t blackholed() const noexcept { return blackholed_.load(); }
    /// Chunks dropped: client→server (blackhole) / server→client (blackhole, swallow, reset_next_reply).
    [[nodiscard]] std::size_t dropped_requests() const noexcept { return dropped_requests_.load(); }
    [[nodiscard]] std::size_t dropped_replies() const noexcept { return dropped_replies_.load(); }
    /// Connections the client ended (its end read as closed), in any mode.
    [[nodiscard]] std::size_t client_hangups() const noexcept { return client_hangups_.load(); }
    /// Connections closed with an RST (reset(), reset_next_reply(), restore()).
    [[nodiscard]] std::size_t resets() const noexcept { return resets_.load(); }

private:
    enum class mode { relay, blackhole, swallow };

    struct link {
        int client = -1;
        int server = -1;  // -1: a black-holed connection, never connected to the server
        int wake = -1;    // eventfd: look at the modes again
        std::thread thread;
        std::atomic<bool> done{false};
        std::atomic<bool> reset{false};       // close with an RST
        std::atomic<bool> lost_bytes{false};  // something was dropped: the stream has a hole
    };

    // Caller holds mutex_. Wakes the relay thread, which closes the sockets.
    static void cut(link& l) {
        if (l.client >= 0) ::shutdown(l.client, SHUT_RDWR);
        if (l.server >= 0) ::shutdown(l.server, SHUT_RDWR);
        poke(l);
    }

    // Caller holds mutex_.
    static void request_reset(link& l) {
        l.reset = true;
        poke(l);
    }

    static void poke(link& l) {
        std::uint64_t one = 1;
        if (l.wake >= 0) (void)!::write(l.wake, &one, sizeof one);
    }

    void set_mode(mode m) {
        std::lock_guard lock(mutex_);
        mode_ = m;
        for (auto& l : links_) poke(*l);
    }

    mode current_mode() {
        std::lock_guard lock(mutex_);
        return mode_;
    }

    // Close a link's sockets (only its relay thread does). With an RST: SO_LINGER
    // of zero makes close() abort the connection instead of sending a FIN.
    void close_link(link& l, bool with_reset) {
        std::lock_guard lock(mutex_);
        for (int fd : {l.client, l.server}) {
            if (fd < 0) continue;
            if (with_reset) {
                linger const abort_now{1, 0};
                ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &abort_now, sizeof abort_now);
            }
            ::close(fd);
        }
        if (with_reset) ++resets_;
        ::close(l.wake);
        l.client = l.server = l.wake = -1;
        l.done = true;
    }

    int connect_target() const {
        addrinfo hints{};
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        addrinfo* res = nullptr;
        if (::getaddrinfo(target_host_.c_str(), std::to_string(target_port_).c_str(), &hints, &res) != 0) return -1;
        int fd = -1;
        for (addrinfo* p = res; p != nullptr; p = p->ai_next) {
            fd = ::socket(p->ai_family, p->ai_socktype | SOCK_CLOEXEC, p->ai_protocol);
            if (fd < 0) continue;
            if (::connect(fd, p->ai_addr, p->ai_addrlen) == 0) break;
            ::close(fd);
            fd = -1;
        }
        ::freeaddrinfo(res);
        return fd;
    }

    void reap_finished() {  // caller holds mutex_
        for (auto it = links_.begin(); it != links_.end();) {
            if ((*it)->done.load()) {
                (*it)->thread.join();
                it = links_.erase(it);
            } else {
                ++it;
            }
        }
    }

    void accept_loop() {
        while (!stopping_) {
            pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
            if (::poll(fds, 2, -1) < 0) {
                if (errno == EINTR) continue;
                return;
            }
            if (fds[1].revents != 0 || stopping_) return;
            if ((fds[0].revents & POLLIN) == 0) continue;
            int client = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
            if (client < 0) continue;
            bool into_blackhole = false;
            {
                std::lock_guard lock(mutex_);
                reap_finished();
                if (blocked_) {
                    ++refused_;  // first: the client sees the close and its test may look at once
                    ::close(client);
                    continue;
                }
                into_blackhole = mode_ == mode::blackhole || hang_new_.load();
            }
            if (into_blackhole) {
                std::lock_guard lock(mutex_);
                start_link(client, -1);
                ++blackholed_;
                continue;
            }
            int server = connect_target();
            if (server < 0) {
                ::close(client);
                continue;
            }
            std::lock_guard lock(mutex_);
            if (blocked_ || stopping_) {  // blocked while we were connecting
                ++refused_;
                ::close(client);
                ::close(server);
                continue;
            }
            // Relay every chunk at once, as the client libraries and servers do on
            // their own sockets: with Nagle's algorithm on the proxy's hop, a
            // reply written in two pieces (MariaDB's CALL: its result set, then
            // its final status) waits for a delayed ACK, 40 ms a round trip.
            int const nodelay = 1;
            ::setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &nodelay, sizeof nodelay);
            ::setsockopt(server, IPPROTO_TCP, TCP_NODELAY, &nodelay, sizeof nodelay);
            start_link(client, server);
            ++forwarded_;
        }
    }

    void start_link(int client, int server) {  // caller holds mutex_
        auto l = std::make_unique<link>();
        l->client = client;
        l->server = server;
        l->wake = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        link* raw = l.get();
        links_.push_back(std::move(l));
        raw->thread = std::thread([this, raw] {
            ::pthread_setname_np(::pthread_self(), thread_name);
            relay(*raw);
        });
    }

    static bool send_all(int fd, char const* data, std::size_t n) {
        while (n > 0) {
            ssize_t w = ::send(fd, data, n, MSG_NOSIGNAL);
            if (w < 0) {
                if (errno == EINTR) continue;
                return false;
            }
            data += w;
            n -= static_cast<std::size_t>(w);
        }
        return true;
    }

    // While stalled: wait, reading nothing, until resumed; false when the link
    // was cut meanwhile (block(), the destructor shut both of its sockets down).
    // A peer that hangs up is not noticed: a silent network does not say so.
    bool wait_while_stalled(link const& l, int const (&ends)[2]) {
        auto constexpr gone = POLLHUP | POLLERR | POLLNVAL;
        while (stalled_.load()) {
            if (l.reset.load() || stopping_.load()) return false;
            pollfd fds[2] = {{ends[0], 0, 0}, {ends[1], 0, 0}};  // only POLLHUP/POLLERR are reported
            if (::poll(fds, 2, 20) < 0 && errno != EINTR) return false;
            bool const client_gone = (fds[0].revents & gone) != 0;
            bool const server_gone = ends[1] < 0 || (fds[1].revents & gone) != 0;
            if (client_gone && server_gone) return false;
            // One end hung up: poll() now returns at once; wait without spinning.
            if ((fds[0].revents | fds[1].revents) != 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        return true;
    }

    void relay(link& l) {
        int const ends[2] = {l.client, l.server};  // only this thread closes them
        char buf[16384];
        bool with_reset = false;
        for (bool open = true; open;) {
            open = wait_while_stalled(l, ends);
            if (!open) break;
            if (l.reset.load()) {
                with_reset = true;
                break;
            }
            pollfd fds[3] = {{ends[0], POLLIN, 0}, {ends[1], POLLIN, 0}, {l.wake, POLLIN, 0}};
            if (::poll(fds, 3, -1) < 0) {
                if (errno == EINTR) continue;
                break;
            }
            if (fds[2].revents != 0) {
                std::uint64_t n = 0;
                (void)!::read(l.wake, &n, sizeof n);
                continue;  // look at the modes (and the reset flag) again
            }
            for (int i = 0; i < 2 && open; ++i) {
                if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
                if (stalled_.load()) break;  // stalled meanwhile: leave it in the socket
                ssize_t r = ::recv(ends[i], buf, sizeof buf, 0);
                if (r < 0 && errno == EINTR) continue;
                if (r <= 0) {
                    if (i == 0) ++client_hangups_;
                    open = false;
                    break;
                }
                bool const reply = i == 1;
                auto const m = current_mode();
                if (m == mode::blackhole || ends[1] < 0 || (reply && m == mode::swallow)) {
                    l.lost_bytes = true;
                    ++(reply ? dropped_replies_ : dropped_requests_);
                    continue;
                }
                if (reply && reset_next_reply_.exchange(false)) {
                    ++dropped_replies_;
                    l.reset = true;
                    break;
                }
                if (!reply && recording_.load()) {
                    std::lock_guard lock(requests_mutex_);
                    requests_.append(buf, static_cast<std::size_t>(r));
                }
                if (auto ms = delay_ms_.load(); ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
                open = wait_while_stalled(l, ends);
                open = open && ends[1 - i] >= 0 && send_all(ends[1 - i], buf, static_cast<std::size_t>(r));
            }
            if (l.reset.load()) {
                with_reset = true;
                break;
            }
        }
        close_link(l, with_reset || l.reset.load());
    }

    std::string target_host_;
    int target_port_;
    int listen_fd_ = -1;
    int wake_fd_ = -1;
    int port_ = 0;
    std::atomic<bool> stopping_{false};
    std::atomic<std::size_t> forwarded_{0};
    std::atomic<std::size_t> refused_{0};
    std::atomic<bool> stalled_{false};
    std::atomic<bool> hang_new_{false};
    std::atomic<long long> delay_ms_{0};
    std::atomic<bool> reset_next_reply_{false};
    std::atomic<std::size_t> blackholed_{0};
    std::atomic<std::size_t> dropped_requests_{0};
    std::atomic<std::size_t> dropped_replies_{0};
    std::atomic<std::size_t> resets_{0};
    std::atomic<std::size_t> client_hangups_{0};
    std::atomic<bool> recording_{false};
    std::mutex requests_mutex_;
    std::string requests_;  // guarded by requests_mutex_
    std::mutex mutex_;
    bool blocked_ = false;                    // guarded by mutex_
    mode mode_ = mode::relay;                 // guarded by mutex_
    std::list<std::unique_ptr<link>> links_;  // guarded by mutex_
    std::thread acceptor_;
};

}  // namespace sqlock_test
