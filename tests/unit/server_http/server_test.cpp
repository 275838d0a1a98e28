// Unit tests for server/http/server in-process (so the ASan unit run covers the socket code):
// pipelining and keep-alive, bind conflicts, chunked streaming, disconnect detection, the error
// answers that close the connection, head timeouts and a stop during a body read.
#include "server/http/server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

namespace dsv4::server::http {
namespace {

using namespace std::chrono_literals;

class TestServer {
 public:
  explicit TestServer(ServerLimits limits = {}) : http(limits) {
    http.get("/hello", [](const Request& req, Response& res) { res.set_content("hi " + req.query, "text/plain"); });
    http.post("/echo", [](const Request& req, Response& res) { res.set_content(req.body, "text/plain"); });
    http.get("/items/(.+)", [](const Request& req, Response& res) { res.set_content(req.matches[1], "text/plain"); });
    http.get("/stream", [](const Request&, Response& res) {
      auto n = std::make_shared<int>(0);
      res.set_chunked_content_provider("text/event-stream", [n](size_t, DataSink& sink) {
        if (*n == 3) {
          sink.done();
          return true;
        }
        const std::string ev = "data: " + std::to_string((*n)++) + "\n\n";
        return sink.write(ev.data(), ev.size());
      });
    });
    http.get("/wait-for-hangup", [this](const Request& req, Response& res) {
      const auto deadline = std::chrono::steady_clock::now() + 10s;
      while (req.client_connected() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(10ms);
      noticed_hangup = !req.client_connected();
      res.set_content("late", "text/plain");
    });
    http.set_error_handler([](const Request&, Response& res) { res.set_content("error: " + res.error_message, "text/plain"); });
    EXPECT_TRUE(http.bind("127.0.0.1", 0).ok());
    thread = std::thread([this] { http.listen(); });
  }
  ~TestServer() {
    http.stop();
    thread.join();
  }
  int port() const { return http.port(); }

  Server http;
  std::thread thread;
  std::atomic<bool> noticed_hangup{false};
};

int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

void send_all(int fd, const std::string& s) { ASSERT_EQ(::send(fd, s.data(), s.size(), MSG_NOSIGNAL), static_cast<ssize_t>(s.size())); }

// Everything until the server closes (or the 10 s receive timeout).
std::string read_all(int fd) {
  std::string out;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return out;
    out.append(buf, static_cast<size_t>(n));
  }
}

std::string exchange(int port, const std::string& request) {
  const int fd = connect_to(port);
  send_all(fd, request);
  std::string out = read_all(fd);
  ::close(fd);
  return out;
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

TEST(HttpServer, PipelinedRequestsAreAnsweredInOrderOnOneConnection) {
  TestServer s;
  const std::string out = exchange(s.port(),
                                   "GET /hello?a HTTP/1.1\r\n\r\n"
                                   "POST /echo HTTP/1.1\r\nContent-Length: 5\r\n\r\nworld"
                                   "POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
                                   "GET /items/x%2Fy HTTP/1.1\r\n\r\n"
                                   "GET /nope HTTP/1.1\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(count(out, "HTTP/1.1 200 OK"), 4u) << out;
  const size_t a = out.find("hi a"), b = out.find("world"), c = out.find("\r\n\r\nabc"), d = out.find("x/y"),
               e = out.find("HTTP/1.1 404");
  ASSERT_NE(e, std::string::npos) << out;
  EXPECT_TRUE(a < b && b < c && c < d && d < e) << out;
  EXPECT_NE(out.find("Connection: close"), std::string::npos);
}

TEST(HttpServer, ASecondServerOnTheSamePortFails) {
  TestServer s;
  Server second;
  const Status st = second.bind("127.0.0.1", s.port());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("Address already in use"), std::string::npos) << st.message();
}

TEST(HttpServer, ChunkedStreamAndHttp10Stream) {
  TestServer s;
  const std::string out = exchange(s.port(), "GET /stream HTTP/1.1\r\nConnection: close\r\n\r\n");
  EXPECT_NE(out.find("Transfer-Encoding: chunked"), std::string::npos) << out;
  EXPECT_NE(out.find("9\r\ndata: 0\n\n\r\n9\r\ndata: 1\n\n\r\n9\r\ndata: 2\n\n\r\n0\r\n\r\n"), std::string::npos) << out;
  const std::string old = exchange(s.port(), "GET /stream HTTP/1.0\r\n\r\n");
  EXPECT_EQ(old.find("Transfer-Encoding"), std::string::npos) << old;
  EXPECT_NE(old.find("\r\n\r\ndata: 0\n\ndata: 1\n\ndata: 2\n\n"), std::string::npos) << old;
}

TEST(HttpServer, AHandlerSeesTheClientHangUp) {
  TestServer s;
  const int fd = connect_to(s.port());
  send_all(fd, "GET /wait-for-hangup HTTP/1.1\r\n\r\n");
  std::this_thread::sleep_for(200ms);
  ::close(fd);
  for (int i = 0; i < 500 && !s.noticed_hangup; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(s.noticed_hangup);
}

TEST(HttpServer, ErrorsAreAnsweredAndTheConnectionClosed) {
  ServerLimits limits;
  limits.parser.max_body_bytes = 8;
  TestServer s(limits);
  auto status_of = [&](const std::string& req) {
    const std::string out = exchange(s.port(), req + "GET /hello HTTP/1.1\r\n\r\n");
    EXPECT_EQ(count(out, "HTTP/1.1 "), 1u) << out;  // the trailing request is never answered
    EXPECT_NE(out.find("Connection: close"), std::string::npos) << out;
    return out.substr(9, 3);
  };
  EXPECT_EQ(status_of("POST /echo HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n"), "400");
  EXPECT_EQ(status_of("POST /echo HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx"), "400");
  EXPECT_EQ(status_of("POST /echo HTTP/1.1\r\nTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n"), "400");
  EXPECT_EQ(status_of("POST /echo HTTP/1.1\r\n\r\n"), "411");
  EXPECT_EQ(status_of("POST /echo HTTP/1.1\r\nContent-Length: 9\r\n\r\n123456789"), "413");
  EXPECT_EQ(status_of("POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n12345\r\n5\r\n12345\r\n0\r\n\r\n"),
            "413");
  EXPECT_EQ(status_of("POST /echo HTTP/1.1\r\nContent-Encoding: gzip\r\nContent-Length: 1\r\n\r\nx"), "415");
  std::string many = "GET /hello HTTP/1.1\r\n";
  for (int i = 0; i < 200; ++i) many += "X-" + std::to_string(i) + ": v\r\n";
  EXPECT_EQ(status_of(many + "\r\n"), "431");
  // The message reaches the error handler.
  const std::string out = exchange(s.port(), "POST /echo HTTP/1.1\r\n\r\n");
  EXPECT_NE(out.find("error: A POST request needs Content-Length"), std::string::npos) << out;
}

TEST(HttpServer, RangeIsIgnoredAndKeepAliveIsUnlimited) {
  TestServer s;
  const int fd = connect_to(s.port());
  std::string all;
  for (int i = 0; i < 20; ++i) all += "GET /hello HTTP/1.1\r\nRange: bytes=0-1\r\n\r\n";
  send_all(fd, all + "GET /hello HTTP/1.1\r\nConnection: close\r\n\r\n");
  const std::string out = read_all(fd);
  ::close(fd);
  EXPECT_EQ(count(out, "HTTP/1.1 200 OK"), 21u) << out;
  EXPECT_EQ(count(out, "hi "), 21u);
  EXPECT_EQ(out.find("206"), std::string::npos);
}

TEST(HttpServer, BodiesInMemoryAreBoundedInAll) {
  ServerLimits limits;
  limits.parser.max_body_bytes = 100;
  limits.max_bodies_bytes = 150;
  TestServer s(limits);
  // A holds 100 bytes of budget while its body trickles in; B's 100 more do not fit.
  const int a = connect_to(s.port());
  send_all(a, "POST /echo HTTP/1.1\r\nContent-Length: 100\r\n\r\n" + std::string(50, 'a'));
  std::this_thread::sleep_for(100ms);
  const std::string b = exchange(s.port(), "POST /echo HTTP/1.1\r\nContent-Length: 100\r\n\r\n" + std::string(100, 'b'));
  EXPECT_EQ(b.substr(0, 12), "HTTP/1.1 503") << b;
  EXPECT_NE(b.find("Retry-After: 1"), std::string::npos) << b;
  const std::string chunked = exchange(s.port(), "POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                                                 "40\r\n" + std::string(64, 'c') + "\r\n0\r\n\r\n");
  EXPECT_EQ(chunked.substr(0, 12), "HTTP/1.1 503") << chunked;
  send_all(a, std::string(50, 'a') + "GET /hello HTTP/1.1\r\nConnection: close\r\n\r\n");
  const std::string out = read_all(a);
  ::close(a);
  EXPECT_EQ(count(out, "HTTP/1.1 200 OK"), 2u) << out;
  // A's share was given back: B fits now.
  const std::string again = exchange(s.port(), "POST /echo HTTP/1.1\r\nContent-Length: 100\r\nConnection: close\r\n\r\n" +
                                                    std::string(100, 'b'));
  EXPECT_EQ(again.substr(0, 12), "HTTP/1.1 200") << again;
}

TEST(HttpServer, SlowHeadGets408) {
  ServerLimits limits;
  limits.head_timeout_ms = 300;
  TestServer s(limits);
  const auto t0 = std::chrono::steady_clock::now();
  const std::string out = exchange(s.port(), "GET /hello HTTP/1.1\r\nHost");
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(out.substr(0, 12), "HTTP/1.1 408") << out;
  EXPECT_LT(secs, 5.0);
}

TEST(HttpServer, StopDoesNotWaitForABodyInFlight) {
  auto s = std::make_unique<TestServer>();
  const int fd = connect_to(s->port());
  send_all(fd, "POST /echo HTTP/1.1\r\nContent-Length: 100\r\n\r\nabc");
  std::this_thread::sleep_for(100ms);
  const auto t0 = std::chrono::steady_clock::now();
  s.reset();  // stop + join
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 3.0);
  ::close(fd);
}

}  // namespace
}  // namespace dsv4::server::http
