// Message helpers shared by dist.cpp and launch.cpp (not part of the kit's API).
#pragma once
#include <string>

namespace kit::dist {

// LibTorch's c10::Error messages carry a C++ backtrace after the first line.
inline std::string first_line(const std::string& s) {
  const auto nl = s.find('\n');
  return nl == std::string::npos ? s : s.substr(0, nl);
}

// c10d's TCP store reports a port already taken as errno 98 / EADDRINUSE.
inline bool is_address_in_use(const std::string& msg) {
  return msg.find("Address already in use") != std::string::npos ||
         msg.find("address already in use") != std::string::npos || msg.find("EADDRINUSE") != std::string::npos ||
         msg.find("errno: 98") != std::string::npos;
}

inline std::string port_in_use_message(int port, const std::string& who) {
  return who + " cannot serve the rendezvous on port " + std::to_string(port) +
         ": the port is already in use (another run, or a process left behind by one).\n"
         "  Fix: pass --port 0 to let the kit pick a free port, or choose another with --port N / MASTER_PORT=N "
         "(and stop the other process if it is a leftover).";
}

}  // namespace kit::dist
