// json_depth.h: a pre-scan of JSON text for its nesting depth, so that the recursive JSON
// parsers (nlohmann's parse and dump recurse per level) are only handed bounded input: the
// server's request bodies (server/request_json.h) and structured outputs' schemas
// (grammar/json_schema.h).
// Thread-safety: a pure function.
#pragma once

#include <string_view>

namespace packserve {

// Deepest nesting of arrays/objects in `json_text` (outside strings); stops counting at
// `limit` + 1. A cheap pre-scan, not a validator.
int json_nesting_depth(std::string_view json_text, int limit);

}  // namespace packserve
