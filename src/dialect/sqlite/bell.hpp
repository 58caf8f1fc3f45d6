// SQLite: the bell, `<database>-<prefix>-bell` beside the database, which a marked release touches
// and each store's listener watches with inotify. The database's directory is often writable by
// several users (SQLite's -wal and -shm need it), so nothing found at that path is trusted: it is
// opened without following a link and without blocking (a FIFO would block an open for ever), and
// used only when it is a regular file with a single link (not a hard link to another file), owned
// by this process's effective user, by the owner of the database file, or by root. Anything else
// is refused: never waited on, never touched.
#pragma once

#include <string>

namespace sqlock::detail::sqlite_engine {

/// `<database>-<prefix>-bell`; empty for a URL without a file of its own (":memory:", a "file:" URI).
[[nodiscard]] std::string bell_path_of(std::string const& database, std::string const& prefix);

enum class bell_state {
    usable,    ///< a bell of the expected kind and owner, open
    missing,   ///< nothing at the path (and it was not to be made)
    unusable,  ///< it cannot be opened or made (a directory this user may not write, no such directory)
    refused,   ///< something else is there: a FIFO, a link, a directory, a file of another owner
};

/// An open bell, or why the path may not serve as one.
struct bell_file {
    bell_state state = bell_state::unusable;
    int fd = -1;      ///< open (O_RDONLY, close-on-exec) when usable; closed by the caller
    std::string why;  ///< unusable or refused: what is wrong, for messages
};

/// Opens the bell at `path` (creating it, mode 0666 less the umask, when `create`), never following
/// a link and never blocking, and checks what it opened. Thread safety: safe.
[[nodiscard]] bell_file open_bell(std::string const& path, std::string const& database, bool create) noexcept;

/// What is wrong with the bell of `database` at `path`, for `sqlock doctor`: empty when it is a
/// usable bell or absent (a store makes it at its first wait). Touches nothing.
[[nodiscard]] std::string bell_problem(std::string const& path, std::string const& database);

/// What to do about a refused bell, for messages: remove it and restrict the directory.
[[nodiscard]] std::string bell_fix(std::string const& path);

}  // namespace sqlock::detail::sqlite_engine
