// The runtime's log: text or runc-compatible JSON lines ({"level","msg","time"}) to --log,
// which containerd's shim and conmon read for the last error.
#pragma once

#include <string>
#include <string_view>

namespace forkbox::log {

enum class Level { Debug, Info, Warning, Error };

// Configures the sink once, from the CLI. Without a file, warnings and errors go to stderr.
void configure(const std::string& path, bool json, bool debug);

void write(Level level, std::string_view msg);
inline void debug(std::string_view m) { write(Level::Debug, m); }
inline void info(std::string_view m) { write(Level::Info, m); }
inline void warn(std::string_view m) { write(Level::Warning, m); }
inline void error(std::string_view m) { write(Level::Error, m); }

bool debug_enabled();
// True when a --log file is set: the CLI then prints errors on stderr too, like runc.
bool has_file();
// The --log file's descriptor, or -1: a forked helper that closes what it inherited keeps it.
int file_fd();

}  // namespace forkbox::log
