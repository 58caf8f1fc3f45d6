// sqlock tests — this machine's TCP sockets as the kernel lists them (/proc/net/tcp and tcp6): which
// connections a process holds open and in which state, whatever the server says of its sessions.
#pragma once

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

namespace sqlock_test {

/// One line of /proc/net/tcp{,6}.
struct tcp_socket {
    int local_port = 0;
    int remote_port = 0;
    int state = 0;      ///< the kernel's TCP state: tcp_established, tcp_close_wait, ...
    std::string inode;  ///< the socket's inode, as /proc/<pid>/fd links name it ("socket:[<inode>]")
};
inline constexpr int tcp_established = 0x01;
inline constexpr int tcp_close_wait = 0x08;

/// Every TCP socket of this machine (IPv4 and IPv6).
inline std::vector<tcp_socket> tcp_sockets() {
    auto const port_of = [](std::string const& address) {
        return std::stoi(address.substr(address.rfind(':') + 1), nullptr, 16);
    };
    std::vector<tcp_socket> out;
    for (char const* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
        std::ifstream in(table);
        std::string line;
        std::getline(in, line);  // header
        while (std::getline(in, line)) {
            std::istringstream f(line);
            std::string sl, local, remote, st, queues, tr, retr, uid, timeout, inode;
            f >> sl >> local >> remote >> st >> queues >> tr >> retr >> uid >> timeout >> inode;
            if (local.empty() || remote.empty() || st.empty()) continue;
            out.push_back({port_of(local), port_of(remote), std::stoi(st, nullptr, 16), inode});
        }
    }
    return out;
}

/// The local ports of this process's sockets connected to `remote_port`: which server sessions are
/// this process's own.
inline std::set<int> own_ports_to(int remote_port) {
    std::set<std::string> inodes;
    for (auto const& fd : std::filesystem::directory_iterator("/proc/self/fd")) {
        std::error_code ec;
        auto target = std::filesystem::read_symlink(fd.path(), ec).string();
        if (!ec && target.rfind("socket:[", 0) == 0) inodes.insert(target.substr(8, target.size() - 9));
    }
    std::set<int> ports;
    for (auto const& s : tcp_sockets())
        if (s.remote_port == remote_port && inodes.count(s.inode) != 0) ports.insert(s.local_port);
    return ports;
}

}  // namespace sqlock_test
