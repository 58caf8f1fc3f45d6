// sqlock tests — a TCP proxy that counts the commands MariaDB clients send,
// for the tests of round trips and prepared statements (engine_suite.cpp,
// hot_path_suite.cpp).
#pragma once

#include "test_env.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace sqlock_test {

/// A TCP proxy that counts the commands MariaDB clients send through it: in the
/// client/server protocol every command starts a new packet sequence (sequence
/// id 0), and each is answered before the next is sent (no pipelining), so the
/// count is the number of round trips. Plain TCP only (the test server has no TLS).
class command_counter {
public:
    explicit command_counter(std::string const& url) : target_(url) {
        listen_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t len = sizeof a;
        if (listen_ < 0 || ::bind(listen_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
            ::getsockname(listen_, reinterpret_cast<sockaddr*>(&a), &len) != 0 || ::listen(listen_, 16) != 0)
            throw std::runtime_error("command_counter: cannot listen on 127.0.0.1");
        port_ = ntohs(a.sin_port);
        acceptor_ = std::thread([this] { accept_loop(); });
    }
    ~command_counter() {
        ::shutdown(listen_, SHUT_RDWR);
        acceptor_.join();
        {
            std::lock_guard lock(mutex_);
            for (auto const& [client, server] : links_) {
                ::shutdown(client, SHUT_RDWR);
                ::shutdown(server, SHUT_RDWR);
            }
        }
        for (auto& t : relays_) t.join();
        ::close(listen_);
    }
    command_counter(command_counter const&) = delete;
    command_counter& operator=(command_counter const&) = delete;

    [[nodiscard]] std::string proxied_url() const {
        auto p = parse_server_url(target_);
        return p.scheme + "://" + p.user + ":" + p.password + "@127.0.0.1:" + std::to_string(port_) + "/" + p.db;
    }
    /// Commands sent so far, and their command bytes (0x03 COM_QUERY, 0x16
    /// COM_STMT_PREPARE, 0x17 COM_STMT_EXECUTE, 0x19 COM_STMT_CLOSE...).
    [[nodiscard]] std::vector<int> commands() const {
        std::lock_guard lock(mutex_);
        return commands_;
    }

private:
    void accept_loop() {
        for (;;) {
            int client = ::accept4(listen_, nullptr, nullptr, SOCK_CLOEXEC);
            if (client < 0) return;
            auto p = parse_server_url(target_);
            int server = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
            sockaddr_in a{};
            a.sin_family = AF_INET;
            a.sin_port = htons(static_cast<std::uint16_t>(std::stoi(p.port)));
            ::inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
            if (server < 0 || ::connect(server, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
                ::close(client);
                if (server >= 0) ::close(server);
                continue;
            }
            std::lock_guard lock(mutex_);
            links_.emplace_back(client, server);
            relays_.emplace_back([this, client, server] { relay(client, server); });
        }
    }

    void relay(int client, int server) {
        std::vector<unsigned char> pending;  // client bytes not yet parsed into packets
        char buf[16384];
        for (;;) {
            pollfd fds[2] = {{client, POLLIN, 0}, {server, POLLIN, 0}};
            if (::poll(fds, 2, -1) < 0 && errno != EINTR) break;
            bool open = true;
            for (int i = 0; i < 2 && open; ++i) {
                if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
                ssize_t r = ::recv(i == 0 ? client : server, buf, sizeof buf, 0);
                open = r > 0 && ::send(i == 0 ? server : client, buf, static_cast<std::size_t>(r), MSG_NOSIGNAL) == r;
                if (open && i == 0) count(pending, buf, static_cast<std::size_t>(r));
            }
            if (!open) break;
        }
        ::shutdown(client, SHUT_RDWR);
        ::shutdown(server, SHUT_RDWR);
    }

    // Packets: a 3-byte little-endian payload length, a sequence id, the payload.
    void count(std::vector<unsigned char>& pending, char const* data, std::size_t n) {
        pending.insert(pending.end(), data, data + n);
        std::size_t at = 0;
        while (pending.size() - at >= 5) {
            std::size_t const length = pending[at] | (pending[at + 1] << 8) | (pending[at + 2] << 16);
            if (pending.size() - at < 4 + length) break;
            if (pending[at + 3] == 0 && length > 0) {
                std::lock_guard lock(mutex_);
                commands_.push_back(pending[at + 4]);
            }
            at += 4 + length;
        }
        pending.erase(pending.begin(), pending.begin() + static_cast<std::ptrdiff_t>(at));
    }

    std::string target_;
    int listen_ = -1;
    int port_ = 0;
    mutable std::mutex mutex_;
    std::vector<int> commands_;               // guarded by mutex_
    std::vector<std::pair<int, int>> links_;  // guarded by mutex_
    std::vector<std::thread> relays_;         // guarded by mutex_ (joined after the acceptor)
    std::thread acceptor_;
};

inline std::string command_list(std::vector<int> const& commands) {
    std::string out;
    for (int c : commands) {
        char hex[8];
        std::snprintf(hex, sizeof hex, " 0x%02x", c);
        out += hex;
    }
    return out.empty() ? " (none)" : out;
}

}  // namespace sqlock_test
