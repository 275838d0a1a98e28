// server/http/server.h — a strict HTTP/1.1 server on POSIX sockets, for `dsv4 serve`.
//
// One thread per connection (bounded by max_connections; beyond that 503 and close): a slow client
// holds only its own thread, never a shared pool's, and is dropped when its timeout runs out:
//   head_timeout   the whole request head must arrive within this (from its first byte) → 408;
//   idle_timeout   a keep-alive connection may wait this long for its next request → closed;
//   read_timeout   the longest wait for the next bytes of a body → 408;
//   write_timeout  the longest wait for a slow reader to take response bytes → closed.
// Bodies in memory are bounded per request (max_body_bytes) and in all (max_bodies_bytes → 503).
// Keep-alive is unlimited in requests; pipelined requests are answered in order (bytes read ahead
// stay in the connection's buffer). Any parse error (request_parser.h) is answered and the
// connection closed; so is any request whose body is not read (answered before reading it: 401,
// 413, 415). Content-Encoding other than identity → 415 (see parse below). Range is ignored.
// Responses: a body with Content-Length, or a content provider written with chunked encoding
// (SSE), which can ask whether the client is still there. Bind: no SO_REUSEPORT, so a second
// server on a taken port fails with "Address already in use".
//
// Handler surface (what server/serve uses):
//   Server http(limits);
//   http.get("/v1/models", [](const Request& req, Response& res) { res.set_content(body, "application/json"); });
//   http.get("/v1/models/(.+)", ...);     // trailing "(.+)" captures the rest: req.matches[1]
//   http.set_pre_routing_handler(...);    // after the head, before the body: auth, CORS
//   http.set_error_handler(...);          // fills empty bodies of 4xx/5xx answers
//   DSV4_RETURN_IF_ERROR(http.bind(host, port));  http.listen();   // blocks until stop()
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "server/http/request_parser.h"

namespace dsv4::server::http {

struct ServerLimits {
  ParserLimits parser;
  int head_timeout_ms = 10'000;
  int idle_timeout_ms = 30'000;
  int read_timeout_ms = 30'000;
  int write_timeout_ms = 30'000;
  int max_connections = 512;
  // Request bodies held in memory at once, all connections together (a body counts from its
  // declared length, or as it is de-chunked, until its answer is written); 0 = max(256 MiB,
  // 4 × max_body_bytes). Over it → 503 with Retry-After, closed: many large uploads at once
  // cannot exhaust memory.
  size_t max_bodies_bytes = 0;
  int stop_grace_ms = 10'000;  // stop(): in-flight responses may finish this long, then are cut
};

class Connection;

struct Request {
  std::string method, target, path, query;
  std::vector<Header> headers;
  std::string body;
  std::vector<std::string> matches;  // [0] the path; [1] what a trailing "(.+)" captured
  // First value of a header (case-insensitive name); "" when absent.
  std::string get_header_value(std::string_view name) const;
  bool has_header(std::string_view name) const;
  // False once the client has closed or reset its connection (checked without blocking).
  bool client_connected() const;

  const Connection* connection = nullptr;
};

// What a content provider writes to. write() frames a chunk; false when the client is gone (or
// too slow: write_timeout). done() ends the response (the last chunk).
class DataSink {
 public:
  virtual ~DataSink() = default;
  virtual bool write(const char* data, size_t size) = 0;
  virtual bool is_writable() const = 0;
  virtual void done() = 0;
};

// Called until it returns false or calls sink.done(); `offset` is the bytes written so far.
using ContentProvider = std::function<bool(size_t offset, DataSink& sink)>;
// Called once when the response ends: success = done() was reached and everything written.
using ContentProviderReleaser = std::function<void(bool success)>;

struct Response {
  int status = 200;
  std::vector<Header> headers;
  std::string body;
  std::string content_type;
  ContentProvider provider;
  ContentProviderReleaser releaser;
  // Set by this layer on its own error answers (parse errors, limits, timeouts): what went wrong,
  // for the error handler to put in the body.
  std::string error_message;

  void set_header(std::string name, std::string value);
  std::string get_header_value(std::string_view name) const;
  void set_content(std::string content, std::string type);
  void set_chunked_content_provider(std::string type, ContentProvider p, ContentProviderReleaser r = {});
};

using Handler = std::function<void(const Request&, Response&)>;
// True = answered (the route is not run and the body is not read).
using PreRoutingHandler = std::function<bool(const Request&, Response&)>;
using ExceptionHandler = std::function<void(const Request&, Response&, std::exception_ptr)>;
using Logger = std::function<void(const Request&, const Response&)>;

class Server {
 public:
  explicit Server(ServerLimits limits = {});
  ~Server();  // stops and joins every connection thread
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Patterns: an exact path, or a prefix followed by "(.+)" (one or more bytes, captured).
  void get(std::string pattern, Handler h);
  void post(std::string pattern, Handler h);
  void del(std::string pattern, Handler h);  // DELETE
  void set_pre_routing_handler(PreRoutingHandler h);
  void set_error_handler(Handler h);
  void set_exception_handler(ExceptionHandler h);
  void set_logger(Logger l);

  Status bind(const std::string& host, int port);  // port 0 → an ephemeral port
  int port() const;
  void listen();  // accepts until stop(); returns when every connection has ended
  void stop();    // thread-safe, idempotent; returns at once (listen() does the waiting)

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace dsv4::server::http
