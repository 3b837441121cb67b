// config.json -> oci::Spec. Every field of runtime-spec 1.3 (config.md, config-linux.md) is read
// and type-checked; unknown fields are ignored and null counts as absent, as in runc. Errors
// name the JSON path: "process.args: expected array of strings",
// "linux.uidMappings[0].size: expected unsigned integer", "root.path: required field is missing".
// Parsing checks shape only; meaning (known names, namespaces, paths) is validate.hpp's job.
#pragma once

#include <string>
#include <string_view>

#include "libforkbox/base/error.hpp"
#include "libforkbox/base/json.hpp"
#include "oci/spec.hpp"

namespace forkbox::oci {

// Parses a whole config.json. ociVersion must be present and be 1.x.
Result<Spec> parse_config(std::string_view json_text);

// Reads and parses a config.json file; errors start with the path.
Result<Spec> load_config(const std::string& path);

// Parses a process object (config.json's "process", or `exec --process FILE`). Error paths are
// relative to `v`'s own path.
Result<Process> parse_process(const json::Value& v);

// Parses a standalone process JSON document, as `exec --process` takes it.
Result<Process> parse_process_json(std::string_view json_text);

// A linux.resources object on its own, as `update --resources` reads it.
Result<Resources> parse_resources_json(std::string_view json_text);

}  // namespace forkbox::oci
