// server/api/json_limits.h — the request body limits of the one JSON parser every route uses
// (request_json.h: parse_json_body); the HTTP layer limits the body's bytes. Beyond any of them
// a request gets 400 naming the limit. /props reports them.
#pragma once

#include <cstddef>

namespace dsv4::server::api {

inline constexpr int kMaxJsonDepth = 256;                        // nesting of arrays/objects
inline constexpr size_t kMaxJsonObjectKeys = 4096;               // distinct keys in one object
inline constexpr size_t kMaxJsonValues = size_t{1} << 22;        // keys + elements + scalars in the whole body
inline constexpr size_t kMaxJsonStringBytes = size_t{16} << 20;  // one string or key, decoded

}  // namespace dsv4::server::api
