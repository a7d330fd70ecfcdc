// SPDX-License-Identifier: Apache-2.0
// TlsSession over memory: two sessions handshake by handing each other
// their ciphertext, then move data both ways; a wrong PSK key or an unknown
// identity is refused; missing credential files are named. (X.509 with real
// clients is tested by the integration tests, with certtool's certificates.)
#include "frontend/tls_session.h"

#include <catch2/catch.hpp>

#include <cstdio>
#include <string>
#include <unistd.h>

using namespace ubcache;

namespace {

constexpr const char* kKey = "0123456789abcdef0123456789abcdef";

std::string PskFile(const std::string& lines) {
  char tmpl[] = "/var/tmp/ubcache-psk-XXXXXX";
  int fd = mkstemp(tmpl);
  REQUIRE(fd >= 0);
  REQUIRE(write(fd, lines.data(), lines.size()) == static_cast<ssize_t>(lines.size()));
  close(fd);
  return tmpl;
}

// Runs both handshakes to the end, handing bytes across; the first error.
Status Pump(TlsSession& client, TlsSession& server) {
  for (int round = 0; round < 50; round++) {
    auto c = client.Handshake();
    if (!c.ok()) return c.status();
    std::vector<uint8_t> b;
    client.TakeCiphertext(&b);
    server.FeedCiphertext(b.data(), b.size());
    auto s = server.Handshake();
    if (!s.ok()) return s.status();
    server.TakeCiphertext(&b);
    client.FeedCiphertext(b.data(), b.size());
    if (*c == TlsSession::Step::kDone && *s == TlsSession::Step::kDone) return Status::OK();
  }
  return Status::IoError("handshake did not finish in 50 rounds");
}

struct Pair {
  std::unique_ptr<TlsSession> client, server;
};
Pair Sessions(const std::shared_ptr<TlsCredentials>& client, const std::shared_ptr<TlsCredentials>& server) {
  auto c = TlsSession::Create(client);
  auto s = TlsSession::Create(server);
  REQUIRE(c.ok());
  REQUIRE(s.ok());
  return {std::move(c).value(), std::move(s).value()};
}

std::string ReadAll(TlsSession& from, size_t want) {
  std::string got;
  uint8_t buf[4096];
  bool eof = false;
  while (got.size() < want) {
    auto n = from.Read(buf, sizeof buf, &eof);
    REQUIRE(n.ok());
    if (*n == 0) break;
    got.append(reinterpret_cast<char*>(buf), *n);
  }
  return got;
}

}  // namespace

TEST_CASE("TLS with a pre-shared key: handshake, data both ways, the peer's identity") {
  std::string file = PskFile(std::string("alice:") + kKey + "\n");
  auto sc = TlsCredentials::ServerPsk(file);
  REQUIRE(sc.ok());
  auto cc = TlsCredentials::ClientPsk("alice", kKey);
  REQUIRE(cc.ok());
  auto [client, server] = Sessions(*cc, *sc);
  Status st = Pump(*client, *server);
  INFO(st.ToString());
  REQUIRE(st.ok());
  CHECK(server->peer() == "alice");

  REQUIRE(client->Write("hello", 5).ok());
  std::vector<uint8_t> wire;
  client->TakeCiphertext(&wire);
  CHECK(std::string(wire.begin(), wire.end()).find("hello") == std::string::npos);  // encrypted
  server->FeedCiphertext(wire.data(), wire.size());
  CHECK(ReadAll(*server, 5) == "hello");

  std::string big(100000, 'x');
  for (size_t i = 0; i < big.size(); i++) big[i] = static_cast<char>('a' + i % 26);
  REQUIRE(server->Write(big.data(), big.size()).ok());
  server->TakeCiphertext(&wire);
  client->FeedCiphertext(wire.data(), wire.size());
  CHECK(ReadAll(*client, big.size()) == big);

  // A close_notify reads as end of stream.
  client->Bye();
  client->TakeCiphertext(&wire);
  server->FeedCiphertext(wire.data(), wire.size());
  uint8_t b[16];
  bool eof = false;
  auto n = server->Read(b, sizeof b, &eof);
  REQUIRE(n.ok());
  CHECK(*n == 0);
  CHECK(eof);
  unlink(file.c_str());
}

TEST_CASE("TLS refuses a wrong pre-shared key and an unknown identity") {
  std::string file = PskFile(std::string("alice:") + kKey + "\n");
  auto sc = TlsCredentials::ServerPsk(file);
  REQUIRE(sc.ok());
  for (auto [who, key] : {std::pair<std::string, std::string>{"alice", "00112233445566778899aabbccddeeff"},
                          std::pair<std::string, std::string>{"mallory", kKey}}) {
    INFO(who << " " << key);
    auto cc = TlsCredentials::ClientPsk(who, key);
    REQUIRE(cc.ok());
    auto [client, server] = Sessions(*cc, *sc);
    Status st = Pump(*client, *server);
    CHECK_FALSE(st.ok());
    CHECK_FALSE(server->handshake_done());
  }
  unlink(file.c_str());
}

TEST_CASE("missing TLS credential files are named") {
  auto psk = TlsCredentials::ServerPsk("/nonexistent/keys.psk");
  REQUIRE_FALSE(psk.ok());
  CHECK_THAT(psk.status().message(), Catch::Contains("/nonexistent/keys.psk"));
  auto x509 = TlsCredentials::ServerX509("/nonexistent/pki", false);
  REQUIRE_FALSE(x509.ok());
  CHECK_THAT(x509.status().message(), Catch::Contains("/nonexistent/pki/server-cert.pem"));
  auto verify = TlsCredentials::ClientX509("/nonexistent/pki");
  REQUIRE_FALSE(verify.ok());
  CHECK_THAT(verify.status().message(), Catch::Contains("ca-cert.pem"));
}
