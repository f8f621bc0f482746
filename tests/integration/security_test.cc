// Remote access: TLS with client certificates and a bearer token, both required once configured.
// The certificates are made here with openssl and thrown away.
#include <catch2/catch.hpp>

#include "support/daemon_fixture.h"
#include "support/temp_dir.h"

using namespace fp8scope::testing;

namespace {

void make_certificate(const TempDir& dir, const std::string& name, const std::string& extension) {
  const std::string key = dir.file(name + ".key"), csr = dir.file(name + ".csr");
  REQUIRE(run_process({"/usr/bin/openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                       "-keyout", key, "-out", csr, "-subj", "/CN=" + name})
              .exit_code == 0);
  const std::string ext = dir.write(name + ".ext", extension);
  REQUIRE(run_process({"/usr/bin/openssl", "x509", "-req", "-in", csr, "-CA", dir.file("ca.pem"), "-CAkey",
                       dir.file("ca.key"), "-CAcreateserial", "-out", dir.file(name + ".pem"), "-days", "1", "-extfile",
                       ext})
              .exit_code == 0);
}

}  // namespace

TEST_CASE("TLS with client certificates and a bearer token", "[security]") {
  TempDir dir;
  REQUIRE(run_process({"/usr/bin/openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                       "-nodes", "-keyout", dir.file("ca.key"), "-out", dir.file("ca.pem"), "-days", "1", "-subj",
                       "/CN=fp8scope-test-ca"})
              .exit_code == 0);
  make_certificate(dir, "server", "subjectAltName=DNS:localhost,IP:127.0.0.1\n");
  make_certificate(dir, "client", "extendedKeyUsage=clientAuth\n");
  const std::string token = dir.write("token", "s3cret-token\n");
  DaemonProcess daemon(dir.file("data"), {"--tls-cert", dir.file("server.pem"), "--tls-key", dir.file("server.key"),
                                          "--tls-client-ca", dir.file("ca.pem"), "--token-file", token});
  const std::vector<std::string> tls = {"--tls-ca", dir.file("ca.pem"), "--tls-cert", dir.file("client.pem"),
                                        "--tls-key", dir.file("client.key"), "--timeout", "5"};
  auto status = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"status", "--endpoint", daemon.grpc()};
    args.insert(args.end(), extra.begin(), extra.end());
    return cli(args);
  };
  std::vector<std::string> ok = tls;
  ok.insert(ok.end(), {"--token-file", token});
  CHECK(status(ok).exit_code == 0);

  const ProcessResult no_token = status(tls);
  CHECK(no_token.exit_code == 1);
  CHECK(no_token.err.find("missing authorization") != std::string::npos);
  std::vector<std::string> wrong = tls;
  wrong.insert(wrong.end(), {"--token-file", dir.write("wrong", "guess")});
  CHECK(status(wrong).err.find("wrong bearer token") != std::string::npos);
  CHECK(status({"--tls-ca", dir.file("ca.pem"), "--token-file", token, "--timeout", "5"}).exit_code == 1);  // no client cert
  CHECK(status({"--token-file", token, "--timeout", "3"}).exit_code == 1);  // plaintext to a TLS port

  // A sample through TLS with the token.
  const std::string npy = npy_file("<f4", false, "(2,)", le_bytes(1.5f) + le_bytes(-2.0f));
  std::vector<std::string> push = {"push", dir.write("t.npy", npy), "--endpoint", daemon.grpc(), "--layer", "l",
                                    "--operand", "x"};
  push.insert(push.end(), ok.begin(), ok.end());
  CHECK(cli(push).exit_code == 0);
}
