// server/api/request_json.cpp — request body → JSON (UTF-8, syntax and depth checked without
// leaking parser internals) and the typed field readers with OpenAI/Anthropic error wording.
#include "server/api/request_json.h"

#include "server/api/openai_chat.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <unordered_map>
#include <vector>

#include "server/api/openai_chat.h"

namespace dsv4::server::api {
namespace {

// A SAX handler that builds the DOM itself, in time linear in the body: nlohmann's own builder
// inserts each key with ordered_map::operator[], a linear search of the object so far (80k keys
// in one object = 3.2e9 string compares, ~13 s). Here each open object keeps a hash index of its
// keys (duplicates: the last value wins, in the first one's place, as nlohmann and Python do) and
// appends to the ordered_map's vector directly. It also enforces the body limits (depth, keys per
// object, values in all, string bytes) and records where and why parsing failed.
class BodySax {
 public:
  explicit BodySax(Json& root) : root_(root) {}

  bool null() { return value(Json(nullptr)); }
  bool boolean(bool v) { return value(Json(v)); }
  bool number_integer(Json::number_integer_t v) { return value(Json(v)); }
  bool number_unsigned(Json::number_unsigned_t v) { return value(Json(v)); }
  bool number_float(Json::number_float_t v, const Json::string_t&) { return value(Json(v)); }
  bool string(Json::string_t& v) {
    if (v.size() > kMaxJsonStringBytes) return limit(LimitHit::kString);
    return value(Json(std::move(v)));
  }
  bool binary(Json::binary_t&) { return false; }  // (never produced by the text parser)
  bool start_object(std::size_t) {
    Json* slot = open_slot();
    if (slot == nullptr) return false;
    *slot = Json::object();
    frames_.push_back({slot, {}, nullptr});
    return true;
  }
  bool key(Json::string_t& k) {
    if (k.size() > kMaxJsonStringBytes) return limit(LimitHit::kString);
    if (!count_value()) return false;  // a key counts as one of the body's values
    Frame& f = frames_.back();
    auto& members = static_cast<Json::object_t::Container&>(f.value->get_ref<Json::object_t&>());
    const auto [it, inserted] = f.index.try_emplace(k, members.size());
    if (inserted) {
      if (members.size() >= kMaxJsonObjectKeys) return limit(LimitHit::kKeys);
      members.emplace_back(std::move(k), Json());
    } else {
      members[it->second].second = Json();  // duplicate key: the last value wins
    }
    f.member = &members[it->second].second;
    return true;
  }
  bool end_object() {
    frames_.pop_back();
    return true;
  }
  bool start_array(std::size_t) {
    Json* slot = open_slot();
    if (slot == nullptr) return false;
    *slot = Json::array();
    frames_.push_back({slot, {}, nullptr});
    return true;
  }
  bool end_array() {
    frames_.pop_back();
    return true;
  }
  template <class Exception>
  bool parse_error(std::size_t position, const std::string& /*last_token*/, const Exception& ex) {
    failed_ = true;
    position_ = position;
    what_ = ex.what();
    return false;
  }

  enum class LimitHit { kNone, kDepth, kKeys, kValues, kString };
  LimitHit limit_hit() const { return limit_hit_; }
  bool failed() const { return failed_; }
  size_t position() const { return position_; }
  const std::string& what() const { return what_; }

 private:
  struct Frame {
    Json* value;                                    // the open array or object
    std::unordered_map<std::string, size_t> index;  // objects: key → position in the member vector
    Json* member;                                   // objects: where the value of the last key goes
  };

  bool limit(LimitHit h) {
    limit_hit_ = h;
    return false;
  }
  bool count_value() {
    if (++values_ > kMaxJsonValues) return limit(LimitHit::kValues);
    return true;
  }
  // Where the next value goes: the root, a new array element, or the last key's member. Pointers
  // stay valid: a container grows only while none of its children is open.
  Json* next_slot() {
    if (frames_.empty()) return &root_;
    Frame& f = frames_.back();
    if (f.value->is_array()) {
      auto& elems = f.value->get_ref<Json::array_t&>();
      elems.emplace_back();
      return &elems.back();
    }
    return f.member;
  }
  Json* open_slot() {
    if (frames_.size() >= static_cast<size_t>(kMaxJsonDepth)) {
      limit(LimitHit::kDepth);
      return nullptr;
    }
    if (!count_value()) return nullptr;
    return next_slot();
  }
  bool value(Json v) {
    if (!count_value()) return false;
    *next_slot() = std::move(v);
    return true;
  }

  Json& root_;
  std::vector<Frame> frames_;
  size_t values_ = 0;
  LimitHit limit_hit_ = LimitHit::kNone;
  bool failed_ = false;
  size_t position_ = 0;
  std::string what_;
};

Status body_error(Dialect d, const std::string& what) {
  if (d == Dialect::kOpenAi) return invalid_argument("We could not parse the JSON body of your request. (" + what + ")");
  return invalid_argument(what);
}

const char* anthropic_type_word(const std::string& expected) {
  if (expected == "a string") return "a valid string";
  if (expected == "an integer") return "a valid integer";
  if (expected == "a number") return "a valid number";
  if (expected == "a boolean") return "a valid boolean";
  if (expected == "an array") return "a valid list";
  if (expected == "an object") return "a valid dictionary";
  return nullptr;
}

std::string quoted_list(const std::vector<std::string>& values, const char* last_joiner) {
  std::string out;
  for (size_t i = 0; i < values.size(); ++i) {
    if (i) out += i + 1 == values.size() ? last_joiner : ", ";
    out += "'" + values[i] + "'";
  }
  return out;
}

std::string value_text(const Json& v) {
  if (v.is_number()) return number_text(v.get<double>());
  return clip(v.dump(-1, ' ', false, Json::error_handler_t::replace));
}

bool in_range(double x, const NumberRange& r) {
  const bool lo_ok = r.lo_inclusive ? x >= r.lo : x > r.lo;
  const bool hi_ok = r.hi_inclusive ? x <= r.hi : x < r.hi;
  return lo_ok && hi_ok;
}

Status err_empty_string(Dialect d, const std::string& field) {
  if (d == Dialect::kOpenAi)
    return invalid_argument("Invalid '" + field +
                            "': empty string. Expected a string with minimum length 1, but got an empty string instead.");
  return invalid_argument(field + ": String should have at least 1 character");
}

}  // namespace

size_t find_invalid_utf8(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    int len = 0;
    uint32_t cp = 0;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
      cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      cp = c & 0x07;
    } else {
      return i;  // continuation byte, C0/C1 (overlong) or F5..FF
    }
    if (i + static_cast<size_t>(len) > n) return i;
    for (int k = 1; k < len; ++k) {
      const unsigned char cc = s[i + static_cast<size_t>(k)];
      if ((cc & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF))
      return i;
    i += static_cast<size_t>(len);
  }
  return std::string_view::npos;
}

Result<Json> parse_json_body(std::string_view text, Dialect d) {
  if (text.find_first_not_of(" \t\r\n") == std::string_view::npos)
    return body_error(d, "The request body is empty; expected a JSON object.");
  if (size_t bad = find_invalid_utf8(text); bad != std::string_view::npos) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "0x%02x", static_cast<unsigned>(static_cast<unsigned char>(text[bad])));
    return body_error(d, std::string("The request body is not valid UTF-8: invalid byte ") + hex + " at offset " +
                             std::to_string(bad) + ".");
  }
  Json body;
  BodySax sax(body);
  const bool ok = Json::sax_parse(text.begin(), text.end(), &sax);
  switch (sax.limit_hit()) {
    case BodySax::LimitHit::kNone: break;
    case BodySax::LimitHit::kDepth:
      return body_error(d, "The request body is nested more than " + std::to_string(kMaxJsonDepth) + " levels deep.");
    case BodySax::LimitHit::kKeys:
      return body_error(d, "An object in the request body has more than " + std::to_string(kMaxJsonObjectKeys) +
                               " keys.");
    case BodySax::LimitHit::kValues:
      return body_error(d, "The request body has more than " + std::to_string(kMaxJsonValues) +
                               " JSON values (keys, elements and scalars in all).");
    case BodySax::LimitHit::kString:
      return body_error(d, "A string in the request body is longer than " + std::to_string(kMaxJsonStringBytes) +
                               " bytes.");
  }
  if (!ok || sax.failed()) {
    const std::string& w = sax.what();
    const char* why = "syntax error";
    if (w.find("surrogate") != std::string::npos) why = "invalid \\u escape (an unpaired UTF-16 surrogate)";
    else if (w.find("control character") != std::string::npos) why = "unescaped control character in a string";
    else if (w.find("unexpected end of input") != std::string::npos) why = "unexpected end of input";
    else if (w.find("expected end of input") != std::string::npos) why = "unexpected data after the JSON value";
    else if (w.find("UTF-8") != std::string::npos) why = "invalid UTF-8";
    const size_t at = sax.position() > 0 ? sax.position() - 1 : 0;
    return body_error(d, std::string("The request body is not valid JSON: ") + why + " at offset " +
                             std::to_string(at) + ".");
  }
  if (!body.is_object()) return err_type(d, "body", "an object", body);
  return body;
}

const char* json_type_name(const Json& j) {
  switch (j.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::boolean: return "a boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned: return "an integer";
    case Json::value_t::number_float: return "a number";
    case Json::value_t::string: return "a string";
    case Json::value_t::array: return "an array";
    case Json::value_t::object: return "an object";
    default: return "an unsupported value";
  }
}

std::string field_index(Dialect d, const std::string& base, size_t i) {
  if (d == Dialect::kOpenAi) return base + "[" + std::to_string(i) + "]";
  return base + "." + std::to_string(i);
}

std::string field_key(const std::string& base, const std::string& key) {
  return base.empty() ? key : base + "." + key;
}

Status err_type(Dialect d, const std::string& field, const std::string& expected, const Json& got) {
  if (d == Dialect::kOpenAi)
    return invalid_argument("Invalid type for '" + field + "': expected " + expected + ", but got " +
                            json_type_name(got) + " instead.");
  const char* word = anthropic_type_word(expected);
  return invalid_argument(field + ": Input should be " + (word ? std::string(word) : expected) + ", got " +
                          json_type_name(got));
}

Status err_missing(Dialect d, const std::string& field) {
  if (d == Dialect::kOpenAi) return invalid_argument("Missing required parameter: '" + field + "'.");
  return invalid_argument(field + ": Field required");
}

Status err_enum(Dialect d, const std::string& field, const std::string& value, const std::vector<std::string>& allowed) {
  if (d == Dialect::kOpenAi)
    return invalid_argument("Invalid value for '" + field + "': '" + clip(value) +
                            "'. Supported values are: " + quoted_list(allowed, " and ") + ".");
  return invalid_argument(field + ": Input should be " + quoted_list(allowed, " or ") + " (got '" + clip(value) + "')");
}

Status err_value(Dialect d, const std::string& field, const std::string& what, StatusCode code) {
  if (d == Dialect::kOpenAi) return Status(code, "Invalid value for '" + field + "': " + what);
  return Status(code, field + ": " + what);
}

Status err_unsupported(Dialect d, const std::string& field, const std::string& what) {
  if (d == Dialect::kOpenAi) return unsupported("Unsupported parameter: '" + field + "': " + what);
  return unsupported(field + ": " + what);
}

Status err_range(Dialect d, const std::string& field, const char* kind, const char* op, double bound, const Json& got) {
  const bool below = op[0] == '>';
  if (d == Dialect::kOpenAi)
    return out_of_range("Invalid '" + field + "': " + kind + (below ? " below minimum value" : " above maximum value") +
                        ". Expected a value " + op + " " + number_text(bound) + ", but got " + value_text(got) +
                        " instead.");
  const char* words = std::strcmp(op, ">=") == 0   ? "greater than or equal to"
                      : std::strcmp(op, ">") == 0  ? "greater than"
                      : std::strcmp(op, "<=") == 0 ? "less than or equal to"
                                                   : "less than";
  return out_of_range(field + ": Input should be " + words + " " + number_text(bound));
}

Status err_array_length(Dialect d, const std::string& field, bool too_long, size_t limit, size_t got) {
  if (d == Dialect::kOpenAi) {
    if (!too_long && got == 0)
      return invalid_argument("Invalid '" + field + "': empty array. Expected an array with minimum length " +
                              std::to_string(limit) + ", but got an empty array instead.");
    return invalid_argument("Invalid '" + field + "': array too " + (too_long ? "long" : "short") +
                            ". Expected an array with " + (too_long ? "maximum" : "minimum") + " length " +
                            std::to_string(limit) + ", but got an array with length " + std::to_string(got) +
                            " instead.");
  }
  return invalid_argument(field + ": List should have " + (too_long ? "at most " : "at least ") +
                          std::to_string(limit) + (limit == 1 ? " item" : " items") + " after validation, not " +
                          std::to_string(got));
}

std::string clip(const std::string& s) {
  constexpr size_t kMax = 64;
  if (s.size() <= kMax) return s;
  size_t cut = kMax;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  return s.substr(0, cut) + "\xE2\x80\xA6";  // …
}

std::string number_text(double v) {
  char buf[40];
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e18) {
    std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
    return buf;
  }
  for (int prec = 1; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*g", prec, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

const Json* find_field(const Json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

Result<std::optional<std::string>> read_string(const Json& obj, const char* key, const std::string& field, Dialect d) {
  const Json* v = find_field(obj, key);
  if (v == nullptr) return std::optional<std::string>();
  if (!v->is_string()) return err_type(d, field, "a string", *v);
  return std::optional<std::string>(v->get<std::string>());
}

Result<std::optional<bool>> read_bool(const Json& obj, const char* key, const std::string& field, Dialect d) {
  const Json* v = find_field(obj, key);
  if (v == nullptr) return std::optional<bool>();
  if (!v->is_boolean()) return err_type(d, field, "a boolean", *v);
  return std::optional<bool>(v->get<bool>());
}

Result<std::optional<double>> read_number(const Json& obj, const char* key, const std::string& field, Dialect d,
                                          NumberRange range) {
  const Json* v = find_field(obj, key);
  if (v == nullptr) return std::optional<double>();
  if (!v->is_number()) return err_type(d, field, "a number", *v);
  const double x = v->get<double>();
  if (!in_range(x, range)) {
    const bool low = range.lo_inclusive ? x < range.lo : x <= range.lo;
    if (low) return err_range(d, field, "decimal", range.lo_inclusive ? ">=" : ">", range.lo, *v);
    return err_range(d, field, "decimal", range.hi_inclusive ? "<=" : "<", range.hi, *v);
  }
  return std::optional<double>(x);
}

Result<int64_t> json_to_int(const Json& v, const std::string& field, Dialect d, int64_t lo, int64_t hi) {
  int64_t x = 0;
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(hi)) return err_range(d, field, "integer", "<=", static_cast<double>(hi), v);
    x = static_cast<int64_t>(u);
  } else if (v.is_number_integer()) {
    x = v.get<int64_t>();
  } else if (v.is_number_float()) {
    const double f = v.get<double>();
    if (!std::isfinite(f) || f != std::floor(f)) return err_type(d, field, "an integer", v);
    if (f < static_cast<double>(lo)) return err_range(d, field, "integer", ">=", static_cast<double>(lo), v);
    if (f > static_cast<double>(hi)) return err_range(d, field, "integer", "<=", static_cast<double>(hi), v);
    if (!(std::fabs(f) < 9007199254740992.0)) return err_type(d, field, "an integer", v);  // not exact beyond 2^53
    x = static_cast<int64_t>(f);
  } else {
    return err_type(d, field, "an integer", v);
  }
  if (x < lo) return err_range(d, field, "integer", ">=", static_cast<double>(lo), v);
  if (x > hi) return err_range(d, field, "integer", "<=", static_cast<double>(hi), v);
  return x;
}

Result<std::optional<int64_t>> read_int(const Json& obj, const char* key, const std::string& field, Dialect d,
                                        int64_t lo, int64_t hi) {
  const Json* v = find_field(obj, key);
  if (v == nullptr) return std::optional<int64_t>();
  DSV4_ASSIGN_OR_RETURN(int64_t x, json_to_int(*v, field, d, lo, hi));
  return std::optional<int64_t>(x);
}

Result<std::optional<uint64_t>> read_uint64(const Json& obj, const char* key, const std::string& field, Dialect d) {
  const Json* v = find_field(obj, key);
  if (v == nullptr) return std::optional<uint64_t>();
  if (v->is_number_unsigned()) return std::optional<uint64_t>(v->get<uint64_t>());
  DSV4_ASSIGN_OR_RETURN(int64_t x, json_to_int(*v, field, d, 0, std::numeric_limits<int64_t>::max()));
  return std::optional<uint64_t>(static_cast<uint64_t>(x));
}

Result<std::vector<std::string>> parse_stop_list(const Json& v, const std::string& field, Dialect d,
                                                 bool allow_single_string) {
  std::vector<std::string> out;
  if (allow_single_string && v.is_string()) {
    if (v.get_ref<const std::string&>().empty()) return err_empty_string(d, field);
    out.push_back(v.get<std::string>());
    return out;
  }
  if (!v.is_array()) return err_type(d, field, allow_single_string ? "a string or an array of strings" : "an array", v);
  if (v.size() > kMaxStopStrings) return err_array_length(d, field, /*too_long=*/true, kMaxStopStrings, v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string f = field_index(d, field, i);
    if (!v[i].is_string()) return err_type(d, f, "a string", v[i]);
    if (v[i].get_ref<const std::string&>().empty()) return err_empty_string(d, f);
    out.push_back(v[i].get<std::string>());
  }
  return out;
}

void read_tool_param_names(const Json& schema, ApiTool& tool) {
  tool.param_names.clear();
  tool.params_known = false;
  if (!schema.is_object()) return;
  auto props = schema.find("properties");
  if (props == schema.end()) {
    // {"type": "object"} with nothing else: a tool without parameters.
    tool.params_known = schema.size() == 1 && schema.contains("type");
    return;
  }
  if (!props->is_object()) return;
  for (auto it = props->begin(); it != props->end(); ++it) tool.param_names.push_back(it.key());
  tool.params_known = true;
}

}  // namespace dsv4::server::api
