// Seccomp profile rules for the unit tests, built in one line.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "oci/spec.hpp"

namespace forkbox::test_util {

inline oci::SeccompSyscall rule(std::vector<std::string> names, std::string action,
                                std::vector<oci::SeccompArg> args = {}) {
    oci::SeccompSyscall s;
    s.names = std::move(names);
    s.action = std::move(action);
    s.args = std::move(args);
    return s;
}

}  // namespace forkbox::test_util
