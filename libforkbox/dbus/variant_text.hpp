// GVariant's text format (the one `busctl`, `gdbus` and runc's org.systemd.property.*
// annotations use), the part of it a unit property needs: `true`, `false`; numbers (int32,
// or double with a point or exponent, unless a type keyword or @T says otherwise:
// `uint64 5`, `@t 5`); strings in '...' or "..." with \-escapes; arrays `[1, 2]` (an empty
// one needs its type: `@as []`); tuples `(1, 'a')`. Pure.
#pragma once

#include <string_view>

#include "libforkbox/base/error.hpp"
#include "libforkbox/dbus/message.hpp"

namespace forkbox::dbus {

Result<Value> parse_variant_text(std::string_view text);

}  // namespace forkbox::dbus
