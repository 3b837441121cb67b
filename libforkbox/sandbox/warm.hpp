// A sandbox's overlay is new, and so is its cache of what it looked up: the first command's
// every path (the shell, its loader, the libraries) is a cold overlay lookup, ~0.1 ms of a
// `sh -c true` on a VM idle between runs. An embryo looks them up while it is built.
#pragma once

#include <string>

namespace forkbox::sandbox {

// Looks up, in the current root, the files the dynamic loader opens to start `program`: the
// program, its interpreter, /etc/ld.so.preload and /etc/ld.so.cache, and the libraries it
// names, each in the first of the usual directories that has it. Opens nothing but O_PATH
// (and the program, to read its headers); failures are ignored: only a later lookup's speed
// depends on it.
void warm_program_lookups(const std::string& program);

}  // namespace forkbox::sandbox
