// SQLite: the bell file, opened and checked (bell.hpp).
#include "dialect/sqlite/bell.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <system_error>

namespace sqlock::detail::sqlite_engine {
namespace {

std::string kind_of(mode_t mode) {
    if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
    if (S_ISLNK(mode)) return "a symbolic link";
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISSOCK(mode)) return "a socket";
    if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
    return "not a regular file";
}

// Empty when `st` may serve as the bell of `database`.
std::string judge(struct stat const& st, std::string const& database) {
    if (!S_ISREG(st.st_mode)) return "it is " + kind_of(st.st_mode) + ", not a regular file";
    if (st.st_nlink != 1)
        return "it has " + std::to_string(st.st_nlink) +
               " hard links (a bell has one: this one may be a link to another file)";
    auto const me = ::geteuid();
    if (st.st_uid == me || st.st_uid == 0) return {};
    struct stat db {};
    bool const known = ::stat(database.c_str(), &db) == 0;
    if (known && db.st_uid == st.st_uid) return {};
    return "it is owned by uid " + std::to_string(st.st_uid) + ", not by this process's user (uid " +
           std::to_string(me) + ")" +
           (known ? ", the database file's owner (uid " + std::to_string(db.st_uid) + ")" : "") + " or root";
}

}  // namespace

std::string bell_path_of(std::string const& database, std::string const& prefix) {
    bool const own_file = !database.empty() && database != ":memory:" && !database.starts_with("file:");
    return own_file ? database + "-" + prefix + "-bell" : std::string{};
}

bell_file open_bell(std::string const& path, std::string const& database, bool create) noexcept {
    bell_file bell;
    try {
        // O_NONBLOCK: an open of a FIFO would wait for a writer; O_NOFOLLOW: a link is refused (ELOOP).
        int const fd = ::open(path.c_str(),
                              O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | (create ? O_CREAT : 0), 0666);
        if (fd < 0) {
            int const err = errno;
            struct stat st {};
            if (::lstat(path.c_str(), &st) != 0) {
                bell.state = err == ENOENT && !create ? bell_state::missing : bell_state::unusable;
                bell.why = "it cannot be made: " + std::system_category().message(err);
            } else if (!S_ISREG(st.st_mode)) {
                bell.state = bell_state::refused;
                bell.why = judge(st, database);
            } else {
                bell.why = "it cannot be opened: " + std::system_category().message(err);
            }
            return bell;
        }
        struct stat st {};
        if (::fstat(fd, &st) != 0) {
            bell.why = "fstat failed: " + std::system_category().message(errno);
            ::close(fd);
            return bell;
        }
        bell.why = judge(st, database);
        if (!bell.why.empty()) {
            bell.state = bell_state::refused;
            ::close(fd);
            return bell;
        }
        bell.state = bell_state::usable;
        bell.fd = fd;
    } catch (...) {  // out of memory composing a message
        bell.state = bell_state::unusable;
    }
    return bell;
}

std::string bell_problem(std::string const& path, std::string const& database) {
    if (path.empty()) return {};
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) return {};
    return judge(st, database);
}

std::string bell_fix(std::string const& path) {
    auto dir = std::filesystem::path(path).parent_path().string();
    if (dir.empty()) dir = ".";
    return "remove it (rm -- '" + path +
           "'; the next store makes a proper one) and let only the users that share "
           "the database write its directory " +
           dir + " (chmod o-w, or a group of their own)";
}

}  // namespace sqlock::detail::sqlite_engine
