// server/http/server.cpp — sockets, the accept loop, one thread per connection, request → route →
// response, chunked streaming, timeouts and graceful stop.
#include "server/http/server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <list>
#include <mutex>
#include <thread>

namespace dsv4::server::http {

using Clock = std::chrono::steady_clock;

namespace {

const char* reason_phrase(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 415: return "Unsupported Media Type";
    case 417: return "Expectation Failed";
    case 422: return "Unprocessable Content";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return status >= 500 ? "Error" : status >= 400 ? "Client Error" : "OK";
  }
}

int remaining_ms(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<int64_t>(left, 1 << 30));
}

struct Route {
  std::string method;
  std::string prefix;  // the exact path, or the prefix before "(.+)"
  bool capture_rest = false;
  Handler handler;
};

}  // namespace

// One accepted socket and the thread serving it.
struct ConnectionSlot {
  int fd = -1;
  std::thread thread;
  std::atomic<bool> finished{false};
};

struct Server::Impl {
  explicit Impl(ServerLimits l) : limits(l) {}

  ServerLimits limits;
  std::vector<Route> routes;
  PreRoutingHandler pre_routing;
  Handler error_handler;
  ExceptionHandler exception_handler;
  Logger logger;

  int listen_fd = -1;
  int bound_port = -1;
  int wake_read = -1, wake_write = -1;  // a pipe: written once by stop(), never drained
  std::atomic<bool> stopping{false};
  std::atomic<size_t> body_bytes{0};  // request bodies in memory now (BodyReservation)
  size_t bodies_limit() const {
    if (limits.max_bodies_bytes > 0) return limits.max_bodies_bytes;
    return std::max<size_t>(size_t{256} << 20, 4 * limits.parser.max_body_bytes);
  }

  std::mutex conn_mu;
  std::list<std::unique_ptr<ConnectionSlot>> connections;

  void accept_one();
  void reject_busy(int fd);
  void reap(bool all);
  void finish_response(const Request& req, Response& res) const;
  const Route* find_route(const std::string& method, const std::string& path, std::vector<std::string>& matches) const;
};

// A request body's share of Impl::body_bytes, returned when the request is done.
class BodyReservation {
 public:
  explicit BodyReservation(Server::Impl& srv) : srv_(srv) {}
  ~BodyReservation() { srv_.body_bytes.fetch_sub(held_); }
  BodyReservation(const BodyReservation&) = delete;
  BodyReservation& operator=(const BodyReservation&) = delete;
  // Holds `total` bytes in all (never less than already held); false when that would pass the limit.
  bool hold(size_t total) {
    if (total <= held_) return true;
    const size_t more = total - held_;
    const size_t before = srv_.body_bytes.fetch_add(more);
    if (before + more > srv_.bodies_limit()) {
      srv_.body_bytes.fetch_sub(more);
      return false;
    }
    held_ = total;
    return true;
  }

 private:
  Server::Impl& srv_;
  size_t held_ = 0;
};

// The state of one connection while its thread serves it.
class Connection {
 public:
  Connection(Server::Impl& server, int fd) : srv_(server), fd_(fd) {}
  void serve();
  bool peer_open() const;
  // After an answer that left request bytes unread: stop sending, then read and drop what the
  // client is still sending (bounded) so that closing does not reset the connection and destroy
  // the answer before the client has read it.
  void linger_if_needed();

 private:
  enum class ReadResult { kData, kEof, kTimeout, kStopped };
  ReadResult read_more(Clock::time_point deadline);
  bool write_all(std::string_view data);
  // Writes an error answer made before any route ran; always closes afterwards. `headers`: those
  // pre-routing already set (CORS), kept on the answer.
  void answer_error(const Request& req, const HttpError& e, const std::vector<Header>& headers = {});
  // Writes `res` (head, then body or provider stream); false when the connection must close.
  bool write_response(const Request& req, Response& res, bool head_only, bool close_after, int minor_version);

  friend class ChunkedSink;
  Server::Impl& srv_;
  int fd_;
  std::string buf_;  // bytes read and not yet parsed (the next pipelined request)
  bool write_failed_ = false;
  bool unread_input_ = false;  // closing after an answer that did not read the whole request
};

class ChunkedSink final : public DataSink {
 public:
  ChunkedSink(Connection& c, bool chunked) : c_(c), chunked_(chunked) {}
  bool write(const char* data, size_t size) override {
    if (failed_ || finished_) return false;
    if (size == 0) return true;
    std::string frame;
    if (chunked_) {
      char len[24];
      std::snprintf(len, sizeof len, "%zx\r\n", size);
      frame = len;
    }
    frame.append(data, size);
    if (chunked_) frame += "\r\n";
    if (!c_.write_all(frame)) failed_ = true;
    offset_ += size;
    return !failed_;
  }
  bool is_writable() const override { return !failed_ && !finished_ && c_.peer_open(); }
  void done() override {
    if (finished_) return;
    finished_ = true;
    if (!failed_ && chunked_ && !c_.write_all("0\r\n\r\n")) failed_ = true;
  }
  size_t offset() const { return offset_; }
  bool finished() const { return finished_; }
  bool failed() const { return failed_; }

 private:
  Connection& c_;
  bool chunked_;
  bool finished_ = false, failed_ = false;
  size_t offset_ = 0;
};

// --- Request / Response -------------------------------------------------------------------------

std::string Request::get_header_value(std::string_view name) const {
  for (const Header& h : headers)
    if (iequals(h.name, name)) return h.value;
  return {};
}

bool Request::has_header(std::string_view name) const {
  for (const Header& h : headers)
    if (iequals(h.name, name)) return true;
  return false;
}

bool Request::client_connected() const { return connection == nullptr || connection->peer_open(); }

void Response::set_header(std::string name, std::string value) {
  for (Header& h : headers)
    if (iequals(h.name, name)) {
      h.value = std::move(value);
      return;
    }
  headers.push_back({std::move(name), std::move(value)});
}

std::string Response::get_header_value(std::string_view name) const {
  for (const Header& h : headers)
    if (iequals(h.name, name)) return h.value;
  return {};
}

void Response::set_content(std::string content, std::string type) {
  body = std::move(content);
  content_type = std::move(type);
}

void Response::set_chunked_content_provider(std::string type, ContentProvider p, ContentProviderReleaser r) {
  content_type = std::move(type);
  provider = std::move(p);
  releaser = std::move(r);
}

// --- Connection ---------------------------------------------------------------------------------

bool Connection::peer_open() const {
  if (write_failed_) return false;
  pollfd p{fd_, POLLRDHUP, 0};
  if (::poll(&p, 1, 0) < 0) return true;
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) == 0;
}

Connection::ReadResult Connection::read_more(Clock::time_point deadline) {
  for (;;) {
    if (srv_.stopping.load()) return ReadResult::kStopped;
    pollfd p[2] = {{fd_, POLLIN, 0}, {srv_.wake_read, POLLIN, 0}};
    const int n = ::poll(p, 2, remaining_ms(deadline));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ReadResult::kEof;
    }
    if (p[1].revents != 0) return ReadResult::kStopped;
    if (n == 0) return ReadResult::kTimeout;
    char tmp[16384];
    const ssize_t got = ::recv(fd_, tmp, sizeof tmp, 0);
    if (got > 0) {
      buf_.append(tmp, static_cast<size_t>(got));
      return ReadResult::kData;
    }
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
    return ReadResult::kEof;
  }
}

bool Connection::write_all(std::string_view data) {
  if (write_failed_) return false;
  while (!data.empty()) {
    const ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd_, POLLOUT, 0};
      const int r = ::poll(&p, 1, srv_.limits.write_timeout_ms);
      if (r > 0 && (p.revents & POLLOUT) != 0) continue;
      if (r < 0 && errno == EINTR) continue;
    }
    write_failed_ = true;  // timeout, reset or closed
    return false;
  }
  return true;
}

void Connection::linger_if_needed() {
  if (!unread_input_ || write_failed_ || srv_.stopping.load()) return;
  ::shutdown(fd_, SHUT_WR);
  const auto deadline = Clock::now() + std::chrono::milliseconds(1000);
  size_t drained = 0;
  while (drained < (size_t{8} << 20)) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, remaining_ms(deadline)) <= 0) return;
    char tmp[16384];
    const ssize_t got = ::recv(fd_, tmp, sizeof tmp, 0);
    if (got <= 0) return;
    drained += static_cast<size_t>(got);
  }
}

void Connection::answer_error(const Request& req, const HttpError& e, const std::vector<Header>& headers) {
  unread_input_ = true;
  Response res;
  res.status = e.status;
  res.headers = headers;
  res.error_message = e.message;
  srv_.finish_response(req, res);
  write_response(req, res, /*head_only=*/false, /*close_after=*/true, 1);
}

bool Connection::write_response(const Request& req, Response& res, bool head_only, bool close_after, int minor_version) {
  const bool streamed = static_cast<bool>(res.provider) && !head_only;
  const bool chunked = streamed && minor_version == 1;
  if (streamed && !chunked) close_after = true;  // HTTP/1.0: the body ends with the connection
  std::string head = "HTTP/1.1 " + std::to_string(res.status) + " " + reason_phrase(res.status) + "\r\n";
  for (const Header& h : res.headers) {
    if (iequals(h.name, "Content-Length") || iequals(h.name, "Transfer-Encoding") || iequals(h.name, "Connection"))
      continue;  // framing is this layer's job
    head += h.name + ": " + h.value + "\r\n";
  }
  if (!res.content_type.empty()) head += "Content-Type: " + res.content_type + "\r\n";
  const bool no_body = res.status == 204 || res.status == 304 || (res.status >= 100 && res.status < 200);
  if (chunked) {
    head += "Transfer-Encoding: chunked\r\n";
  } else if (!streamed && !no_body) {
    head += "Content-Length: " + std::to_string(res.body.size()) + "\r\n";
  }
  if (close_after) {
    head += "Connection: close\r\n";
  } else if (minor_version == 0) {
    head += "Connection: keep-alive\r\n";
  }
  head += "\r\n";
  if (!streamed) {
    if (res.provider && res.releaser) res.releaser(false);  // HEAD: the stream is never produced
    if (!head_only && !no_body) head += res.body;
    const bool ok = write_all(head);
    if (srv_.logger) srv_.logger(req, res);
    return ok && !close_after;
  }
  ChunkedSink sink(*this, chunked);
  bool ok = write_all(head);
  while (ok && !sink.finished()) {
    if (!res.provider(sink.offset(), sink) || sink.failed()) ok = false;
  }
  ok = ok && sink.finished() && !sink.failed();
  if (res.releaser) res.releaser(ok);
  if (srv_.logger) srv_.logger(req, res);
  return ok && !close_after;
}

void Connection::serve() {
  const ServerLimits& lim = srv_.limits;
  for (;;) {
    // 1. The head: idle wait for a first byte, then head_timeout for the rest.
    size_t scan_from = 0;
    size_t head_len = 0;
    auto idle_deadline = Clock::now() + std::chrono::milliseconds(lim.idle_timeout_ms);
    Clock::time_point head_deadline{};
    bool head_started = false;
    for (;;) {
      if (const size_t skip = leading_empty_lines(buf_); skip > 0) {
        buf_.erase(0, skip);
        scan_from = 0;
      }
      if (!buf_.empty() && !head_started) {
        head_started = true;
        head_deadline = Clock::now() + std::chrono::milliseconds(lim.head_timeout_ms);
      }
      head_len = find_head_end(buf_, scan_from);
      if (head_len > 0) break;
      if (auto e = check_partial_head(buf_, lim.parser)) return answer_error(Request{}, *e);
      scan_from = buf_.size();
      if (!head_started && srv_.stopping.load()) return;  // idle: a stop closes it
      switch (read_more(head_started ? head_deadline : idle_deadline)) {
        case ReadResult::kData: break;
        case ReadResult::kEof:
        case ReadResult::kStopped: return;
        case ReadResult::kTimeout:
          if (!head_started) return;
          return answer_error(Request{}, {408, "The request head did not arrive within " +
                                                   std::to_string(lim.head_timeout_ms / 1000) + " s."});
      }
    }

    // 2. Parse it.
    RequestHead head;
    HttpError err;
    const ParseResult parsed = parse_request_head(std::string_view(buf_).substr(0, head_len), lim.parser, head, err);
    buf_.erase(0, head_len);
    Request req;
    req.connection = this;
    if (parsed == ParseResult::kError) {
      req.method = head.method;
      req.path = head.path;
      return answer_error(req, err);
    }
    req.method = head.method;
    req.target = head.target;
    req.path = head.path;
    req.query = head.query;
    req.headers = head.headers;
    req.matches = {req.path};
    bool close_after = !head.keep_alive;
    const bool head_only = req.method == "HEAD";

    // 3. Pre-routing (authentication, CORS) sees the head only: an answer here leaves the body
    // unread, so the connection closes after it (the body is never parsed as a request).
    Response res;
    const bool handled = srv_.pre_routing && srv_.pre_routing(req, res);
    if (handled) {
      if (head.framing != BodyFraming::kNone) close_after = unread_input_ = true;
      srv_.finish_response(req, res);
      if (!write_response(req, res, head_only, close_after || srv_.stopping.load(), head.minor_version)) return;
      continue;
    }

    // 4. The body: no content coding is accepted (see README: a decoded-size bound would be needed
    // and no client of these APIs compresses requests), then read with a per-read timeout.
    if (const std::string* ce = head.find("Content-Encoding"); ce != nullptr && !iequals(*ce, "identity")) {
      res.status = 415;
      res.set_header("Accept-Encoding", "identity");
      res.error_message = "Content-Encoding '" + ce->substr(0, 64) +
                          "' is not supported: send the request body uncompressed.";
      srv_.finish_response(req, res);
      unread_input_ = head.framing != BodyFraming::kNone;
      write_response(req, res, head_only, true, head.minor_version);
      return;
    }
    BodyReservation reservation(srv_);
    const HttpError busy{503, "The server is receiving too many request bodies at once (" +
                                  std::to_string(srv_.bodies_limit() >> 20) + " MiB in all). Retry after a moment."};
    if (head.framing != BodyFraming::kNone) {
      if (!reservation.hold(static_cast<size_t>(head.content_length))) {
        res.set_header("Retry-After", "1");
        return answer_error(req, busy, res.headers);
      }
      if (head.expect_continue && buf_.empty() && !write_all("HTTP/1.1 100 Continue\r\n\r\n")) return;
      BodyDecoder decoder(head, lim.parser);
      for (;;) {
        size_t used = 0;
        const ParseResult r = decoder.feed(buf_, used, req.body, err);
        buf_.erase(0, used);
        if (!reservation.hold(req.body.size())) {  // chunked: the body grows as it is decoded
          res.set_header("Retry-After", "1");
          return answer_error(req, busy, res.headers);
        }
        if (r == ParseResult::kComplete) break;
        if (r == ParseResult::kError) return answer_error(req, err, res.headers);
        switch (read_more(Clock::now() + std::chrono::milliseconds(lim.read_timeout_ms))) {
          case ReadResult::kData: break;
          case ReadResult::kEof:
          case ReadResult::kStopped: return;
          case ReadResult::kTimeout:
            return answer_error(req, {408, "The request body stalled for " + std::to_string(lim.read_timeout_ms / 1000) +
                                               " s."}, res.headers);
        }
      }
    }

    // 5. Route and answer.
    if (const Route* route = srv_.find_route(req.method, req.path, req.matches)) {
      try {
        route->handler(req, res);
      } catch (...) {
        res = Response{};
        res.status = 500;
        if (srv_.exception_handler) srv_.exception_handler(req, res, std::current_exception());
      }
    } else {
      res.status = 404;
    }
    srv_.finish_response(req, res);
    if (!write_response(req, res, head_only, close_after || srv_.stopping.load(), head.minor_version)) return;
  }
}

// --- Server -------------------------------------------------------------------------------------

const Route* Server::Impl::find_route(const std::string& method, const std::string& path,
                                      std::vector<std::string>& matches) const {
  const std::string& m = method == "HEAD" ? std::string("GET") : method;
  for (const Route& r : routes) {
    if (r.method != m) continue;
    if (!r.capture_rest) {
      if (path == r.prefix) return &r;
      continue;
    }
    if (path.size() > r.prefix.size() && path.compare(0, r.prefix.size(), r.prefix) == 0) {
      matches = {path, path.substr(r.prefix.size())};
      return &r;
    }
  }
  return nullptr;
}

void Server::Impl::finish_response(const Request& req, Response& res) const {
  if (res.status >= 400 && res.body.empty() && !res.provider && error_handler) error_handler(req, res);
}

void Server::Impl::reject_busy(int fd) {
  Request req;
  Response res;
  res.status = 503;
  res.error_message = "The server has " + std::to_string(limits.max_connections) +
                      " open connections, its limit. Retry after a moment.";
  finish_response(req, res);
  std::string out = "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nConnection: close\r\n";
  if (!res.content_type.empty()) out += "Content-Type: " + res.content_type + "\r\n";
  out += "Content-Length: " + std::to_string(res.body.size()) + "\r\n\r\n" + res.body;
  (void)::send(fd, out.data(), out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);  // best effort, never blocks
  ::close(fd);
}

void Server::Impl::accept_one() {
  const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd < 0) {
    if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));  // out of descriptors: let some close
    return;
  }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  std::lock_guard<std::mutex> lock(conn_mu);
  size_t active = 0;
  for (const auto& c : connections)
    if (!c->finished.load()) ++active;
  if (active >= static_cast<size_t>(limits.max_connections)) return reject_busy(fd);
  auto slot = std::make_unique<ConnectionSlot>();
  slot->fd = fd;
  ConnectionSlot* s = slot.get();
  try {
    s->thread = std::thread([this, s] {
      Connection c(*this, s->fd);
      c.serve();
      c.linger_if_needed();
      ::shutdown(s->fd, SHUT_RDWR);  // the client sees the end now; reap() closes the descriptor
      s->finished = true;
    });
  } catch (const std::system_error&) {
    return reject_busy(fd);  // no thread could be started
  }
  connections.push_back(std::move(slot));
}

void Server::Impl::reap(bool all) {
  std::list<std::unique_ptr<ConnectionSlot>> done;
  {
    std::lock_guard<std::mutex> lock(conn_mu);
    for (auto it = connections.begin(); it != connections.end();) {
      if (all || (*it)->finished.load()) {
        done.push_back(std::move(*it));
        it = connections.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& c : done) {
    if (c->thread.joinable()) c->thread.join();
    ::close(c->fd);
  }
}

Server::Server(ServerLimits limits) : impl_(std::make_unique<Impl>(limits)) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC | O_NONBLOCK) == 0) {
    impl_->wake_read = p[0];
    impl_->wake_write = p[1];
  }
}

Server::~Server() {
  stop();
  impl_->reap(/*all=*/true);
  if (impl_->listen_fd >= 0) ::close(impl_->listen_fd);
  if (impl_->wake_read >= 0) ::close(impl_->wake_read);
  if (impl_->wake_write >= 0) ::close(impl_->wake_write);
}

namespace {
Route make_route(std::string method, std::string pattern, Handler h) {
  Route r;
  r.method = std::move(method);
  static constexpr std::string_view kRest = "(.+)";
  if (pattern.size() > kRest.size() && pattern.compare(pattern.size() - kRest.size(), kRest.size(), kRest) == 0) {
    pattern.resize(pattern.size() - kRest.size());
    r.capture_rest = true;
  }
  r.prefix = std::move(pattern);
  r.handler = std::move(h);
  return r;
}
}  // namespace

void Server::get(std::string pattern, Handler h) { impl_->routes.push_back(make_route("GET", std::move(pattern), std::move(h))); }
void Server::post(std::string pattern, Handler h) {
  impl_->routes.push_back(make_route("POST", std::move(pattern), std::move(h)));
}
void Server::del(std::string pattern, Handler h) {
  impl_->routes.push_back(make_route("DELETE", std::move(pattern), std::move(h)));
}
void Server::set_pre_routing_handler(PreRoutingHandler h) { impl_->pre_routing = std::move(h); }
void Server::set_error_handler(Handler h) { impl_->error_handler = std::move(h); }
void Server::set_exception_handler(ExceptionHandler h) { impl_->exception_handler = std::move(h); }
void Server::set_logger(Logger l) { impl_->logger = std::move(l); }

Status Server::bind(const std::string& host, int port) {
  if (impl_->wake_read < 0) return io_error("cannot create the server's wake-up pipe");
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string port_text = std::to_string(port);
  const std::string where = host + ":" + port_text;
  if (int rc = ::getaddrinfo(host.c_str(), port_text.c_str(), &hints, &res); rc != 0)
    return io_error("cannot bind " + where + ": " + ::gai_strerror(rc));
  std::string last_error = "no address";
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      last_error = std::strerror(errno);
      continue;
    }
    // SO_REUSEADDR only (a restart may bind over TIME_WAIT sockets); never SO_REUSEPORT, which
    // would let a second server share the port and split the traffic.
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 512) == 0) {
      sockaddr_storage ss{};
      socklen_t len = sizeof ss;
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
      impl_->bound_port = ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                                                   : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
      impl_->listen_fd = fd;
      ::freeaddrinfo(res);
      return ok_status();
    }
    last_error = std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(res);
  return io_error("cannot bind " + where + ": " + last_error);
}

int Server::port() const { return impl_->bound_port; }

void Server::listen() {
  Impl& m = *impl_;
  if (m.listen_fd < 0) return;
  while (!m.stopping.load()) {
    pollfd p[2] = {{m.listen_fd, POLLIN, 0}, {m.wake_read, POLLIN, 0}};
    const int n = ::poll(p, 2, 1000);
    m.reap(/*all=*/false);
    if (n < 0 && errno != EINTR) break;
    if (n <= 0 || p[1].revents != 0) continue;
    if (p[0].revents & POLLIN) m.accept_one();
  }
  ::close(m.listen_fd);
  m.listen_fd = -1;
  // Idle connections closed at once on the wake-up; in-flight answers may finish within the grace.
  const auto deadline = Clock::now() + std::chrono::milliseconds(m.limits.stop_grace_ms);
  for (;;) {
    m.reap(/*all=*/false);
    {
      std::lock_guard<std::mutex> lock(m.conn_mu);
      if (m.connections.empty()) break;
      if (Clock::now() >= deadline)
        for (const auto& c : m.connections) ::shutdown(c->fd, SHUT_RDWR);  // cut what is left
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

void Server::stop() {
  if (impl_->stopping.exchange(true)) return;
  if (impl_->wake_write >= 0) {
    const char b = 1;
    (void)!::write(impl_->wake_write, &b, 1);
  }
}

}  // namespace dsv4::server::http
