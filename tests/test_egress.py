"""The egress policy as an attacker meets it: every way to name a private address is
refused before anything is sent. Resolvers are passed in, and a guard fails the test if
any socket connects to an address that is not loopback: these tests never send a packet
beyond this machine."""

from __future__ import annotations

import datetime
import http.server
import ipaddress
import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cryopg import egress
from cryopg.egress import Allow, Refused, check_url
from cryopg.triggers import forge


def _loopback(address: Any) -> bool:
    host = address[0] if isinstance(address, tuple) else address
    try:
        ip = ipaddress.ip_address(str(host).split("%")[0])
    except ValueError:
        return False
    return ip.is_loopback or (ip.version == 6 and ip.ipv4_mapped is not None
                              and ip.ipv4_mapped.is_loopback)


@pytest.fixture(autouse=True)
def only_loopback(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Fails the test on any connection to a non-loopback address; records the others."""
    seen: list[Any] = []
    real_create, real_connect = socket.create_connection, socket.socket.connect

    def create(address: Any, *args: Any, **kwargs: Any) -> socket.socket:
        if not _loopback(address):
            pytest.fail(f"connected to a non-loopback address: {address!r}")
        seen.append(address)
        return real_create(address, *args, **kwargs)

    def connect(self: socket.socket, address: Any) -> None:
        if self.family in (socket.AF_INET, socket.AF_INET6) and not _loopback(address):
            pytest.fail(f"connected to a non-loopback address: {address!r}")
        return real_connect(self, address)

    monkeypatch.setattr(socket, "create_connection", create)
    monkeypatch.setattr(socket.socket, "connect", connect)
    for name in (egress.ALLOW_ENV, *egress.OLD_ALLOW_ENVS):
        monkeypatch.delenv(name, raising=False)
    return seen


def resolving_to(*addresses: str) -> egress.Resolver:
    return lambda host, port: list(addresses)


def never_resolve(host: str, port: int) -> list[str]:
    pytest.fail(f"resolved {host}, which should have been refused before")


NONE = Allow()

# (an address a name may resolve to, the phrase its refusal must hold)
REFUSED = [
    ("127.0.0.1", "loopback"), ("127.1.2.3", "loopback"), ("::1", "loopback"),
    ("0.0.0.0", "unspecified"), ("::", "unspecified"),
    ("10.1.2.3", "private"), ("172.16.0.1", "private"), ("192.168.1.1", "private"),
    ("fd12:3456::1", "private"), ("fc00::1", "private"),
    ("169.254.1.1", "link-local"), ("fe80::1", "link-local"),
    ("100.64.0.1", "CGNAT"), ("100.127.255.254", "CGNAT"),
    ("169.254.169.254", "metadata"), ("169.254.170.2", "metadata"),
    ("fd00:ec2::254", "metadata"), ("100.100.100.200", "metadata"),
    ("224.0.0.1", "multicast"), ("ff02::1", "multicast"),
    ("255.255.255.255", "broadcast"), ("240.0.0.1", "reserved"),
    ("198.18.0.1", "reserved"), ("192.0.2.1", "reserved"), ("2001:db8::1", "reserved"),
    ("::ffff:127.0.0.1", "127.0.0.1, a loopback"), ("::ffff:169.254.169.254", "metadata"),
    ("::127.0.0.1", "127.0.0.1, a loopback"), ("::10.0.0.1", "private"),
    ("64:ff9b::7f00:1", "127.0.0.1, a loopback"), ("64:ff9b::a9fe:a9fe", "metadata"),
    ("64:ff9b:1::a00:1", "local-use NAT64"),
    ("2002:7f00:1::1", "127.0.0.1, a loopback"), ("2002:a00:1::", "private"),
    ("2001:0:4136:e378:8000:63bf:80ff:fffe", "Teredo"),  # client 127.0.0.1
    # IPv4-translated (SIIT, ::ffff:0:0:0/96) and ISATAP interface ids carry an IPv4 too.
    ("::ffff:0:7f00:1", "127.0.0.1, a loopback"), ("::ffff:0:a9fe:a9fe", "metadata"),
    ("::ffff:0:a00:1", "private"), ("2001:db9::5efe:7f00:1", "127.0.0.1, a loopback"),
    ("2001:db9::200:5efe:a9fe:a9fe", "metadata"),
]


@pytest.mark.parametrize(("address", "phrase"), REFUSED)
def test_a_name_resolving_to_a_private_address_is_refused(address: str, phrase: str) -> None:
    with pytest.raises(Refused) as got:
        check_url("https://innocent.example/x", NONE, resolving_to(address))
    assert phrase in got.value.reason and address in got.value.reason
    assert got.value.address == address
    assert f"set {egress.ALLOW_ENV}" in got.value.line("http node")


@pytest.mark.parametrize("address", ["93.184.216.34", "2606:4700:4700::1111",
                                     "64:ff9b::808:808", "::ffff:8.8.8.8", "2002:808:808::1",
                                     "::ffff:0:808:808", "2001:db9::5efe:808:808",
                                     "1.1.1.1"])
def test_a_public_address_passes_and_is_the_one_pinned(address: str) -> None:
    target = check_url("https://Example.COM:8443/a/b?c=d#frag", NONE, resolving_to(address))
    assert (target.scheme, target.host, target.port) == ("https", "example.com", 8443)
    assert target.addresses == (address,) and target.path == "/a/b?c=d"


def test_one_private_address_among_public_ones_refuses_the_url() -> None:
    with pytest.raises(Refused, match="resolves to 10.0.0.7, which is a private"):
        check_url("http://mixed.example/", NONE,
                  resolving_to("93.184.216.34", "10.0.0.7", "1.1.1.1"))


@pytest.mark.parametrize("host", ["127.0.0.1", "2130706433", "0x7f000001", "0x7f.1",
                                  "0177.0.0.1", "127.1", "[::1]", "[::ffff:127.0.0.1]",
                                  "[64:ff9b::7f00:1]", "0.0.0.0", "0", "169.254.169.254",
                                  "[fd00:ec2::254]", "[::ffff:7f00:1]", "localhost",
                                  "[::ffff:0:7f00:1]", "[::ffff:0:a9fe:a9fe]"])
def test_every_spelling_of_a_local_address_is_refused(host: str) -> None:
    # The system resolver only parses these (numbers, or /etc/hosts): nothing is sent.
    with pytest.raises(Refused) as got:
        check_url(f"http://{host}:8080/", NONE)
    assert got.value.address is not None, got.value.reason
    line = got.value.line("http node")
    assert line.startswith(f"http node: refused http://{host}:8080/: ") and "\n" not in line


@pytest.mark.parametrize("url", ["file:///etc/passwd", "FILE:///root/.cryopg/dev.json",
                                 "ftp://example.com/x", "data:text/plain,hi",
                                 "gopher://example.com/", "javascript:alert(1)",
                                 "dict://127.0.0.1:11211/", "//example.com/x", "example.com",
                                 "http:///nohost", "http://user:pw@example.com/",
                                 "http://127.0.0.1@example.com/", "http://exa mple.com/",
                                 "http://example.com\\@127.0.0.1/", "http://example.com:99999/",
                                 "http://x\r\nHost: y/", ""])
def test_urls_that_are_not_plain_web_urls_are_refused_unresolved(url: str) -> None:
    with pytest.raises(Refused) as got:
        check_url(url, NONE, never_resolve)
    assert got.value.address is None and "\n" not in got.value.line("http node")


def test_the_error_line_names_the_address_and_the_knob() -> None:
    with pytest.raises(Refused) as got:
        check_url("https://127.0.0.1/", NONE)
    assert got.value.line("http node") == (
        "http node: refused https://127.0.0.1/: 127.0.0.1 is a loopback address "
        "(set CRYOPG_EGRESS_ALLOW to allow it)")


def test_the_allowlist_names_hosts_addresses_and_networks() -> None:
    allow = Allow.parse(" 127.0.0.1 ,10.0.0.0/8, Internal.Example., [fd00::5]")
    assert check_url("http://127.0.0.1:1/", allow).addresses == ("127.0.0.1",)
    assert check_url("http://x.example/", allow, resolving_to("10.9.8.7")).addresses
    assert check_url("http://[fd00::5]/", allow).addresses == ("fd00::5",)
    # A named host passes whatever it resolves to: the deployment vouched for the name.
    assert check_url("http://internal.example/", allow, resolving_to("192.168.0.9"))
    assert check_url("http://x.example/", allow, resolving_to("::ffff:127.0.0.1"))
    for refused in ("127.0.0.2", "192.168.0.9", "fd00::6"):
        with pytest.raises(Refused):
            check_url("http://x.example/", allow, resolving_to(refused))
    # Listing one name or address does not open another.
    with pytest.raises(Refused):
        check_url("http://other.example/", allow, resolving_to("192.168.0.9"))


def test_metadata_passes_only_when_named_exactly() -> None:
    wide = Allow.parse("169.254.0.0/16,0.0.0.0/0")
    with pytest.raises(Refused, match="metadata"):
        check_url("http://169.254.169.254/latest/", wide)
    assert check_url("http://169.254.1.1/", wide)
    assert check_url("http://169.254.169.254/latest/", Allow.parse("169.254.169.254"))


def test_the_allowlist_comes_from_the_new_and_the_old_variable() -> None:
    env = {"CRYOPG_EGRESS_ALLOW": "10.0.0.1", "CRYOPG_FORGE_ALLOWLIST": "forge.internal"}
    allow = Allow.from_env(env)
    assert "10.0.0.1" in allow and "forge.internal" in allow and "10.0.0.2" not in allow
    assert "FORGE.internal." in allow
    assert Allow.from_env({}) == Allow()


def test_http_to_a_plain_public_host_is_allowed_but_https_only_callers_refuse_it() -> None:
    assert check_url("http://example.com/", NONE, resolving_to("93.184.216.34"))
    with pytest.raises(Refused, match="must be https"):
        check_url("http://example.com/", NONE, never_resolve, schemes=frozenset({"https"}))


# -- the pinned connection ------------------------------------------------------------------

class _Echo(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        body = self.headers.get("Host", "").encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        return None


@pytest.fixture
def echo() -> Iterator[http.server.HTTPServer]:
    server = http.server.HTTPServer(("127.0.0.1", 0), _Echo)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _no_lookup(monkeypatch: pytest.MonkeyPatch) -> None:
    real = socket.getaddrinfo

    def numeric_only(host: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            ipaddress.ip_address(str(host))  # parsing an address sends nothing
        except ValueError:
            pytest.fail(f"a second DNS lookup, of {host!r}")
        return real(host, *args, **kwargs)
    monkeypatch.setattr(socket, "getaddrinfo", numeric_only)


def test_the_connection_goes_to_the_checked_address_with_the_urls_host(
        echo: http.server.HTTPServer, monkeypatch: pytest.MonkeyPatch,
        only_loopback: list[Any]) -> None:
    port = echo.server_address[1]
    target = check_url(f"http://pinned.example:{port}/", Allow.parse("pinned.example"),
                       resolving_to("127.0.0.1"))
    _no_lookup(monkeypatch)  # pinned.example does not even exist: only the pin can work
    conn = egress.connection(target, 5)
    try:
        conn.request("GET", target.path)
        resp = conn.getresponse()
        assert resp.status == 200 and resp.read() == f"pinned.example:{port}".encode()
    finally:
        conn.close()
    assert only_loopback == [("127.0.0.1", port)]


def _certificate(tmp: Path, name: str) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = tmp / f"{name}.pem", tmp / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


def test_tls_names_and_verifies_the_urls_host_not_the_address(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cert, key = _certificate(tmp_path, "pinned.example")
    sni: list[str | None] = []
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(cert, key)
    server_ctx.sni_callback = lambda sock, name, ctx: sni.append(name)  # type: ignore[assignment,misc,return-value]
    server = http.server.HTTPServer(("127.0.0.1", 0), _Echo)
    server.socket = server_ctx.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    port = server.server_address[1]
    client_ctx = ssl.create_default_context(cafile=str(cert))
    try:
        allow = Allow.parse("pinned.example,other.example")
        target = check_url(f"https://pinned.example:{port}/", allow, resolving_to("127.0.0.1"))
        _no_lookup(monkeypatch)
        conn = egress.connection(target, 5, client_ctx)
        conn.request("GET", "/")
        assert conn.getresponse().read() == f"pinned.example:{port}".encode()
        conn.close()
        assert sni == ["pinned.example"]
        # The same address under another name fails the certificate check.
        other = check_url(f"https://other.example:{port}/", allow, resolving_to("127.0.0.1"))
        conn = egress.connection(other, 5, client_ctx)
        with pytest.raises(ssl.SSLCertVerificationError):
            conn.request("GET", "/")
        conn.close()
    finally:
        server.shutdown()
        server.server_close()


# -- commit statuses (cryopg/triggers/forge.py) ------------------------------------------

@pytest.mark.parametrize("url", ["https://[64:ff9b::7f00:1]/s", "https://[::ffff:10.0.0.1]/s",
                                 "https://169.254.169.254/s", "https://2130706433/s",
                                 "https://[2002:7f00:1::]/s", "http://93.184.216.34/s",
                                 "file:///etc/passwd"])
async def test_a_commit_status_to_a_private_address_is_never_sent(url: str) -> None:
    with pytest.raises(forge.Refused) as got:
        await forge.post_status(url, {"state": "success"}, Allow())
    assert "\n" not in str(got.value)


async def test_a_commit_status_refusal_says_why_and_how_to_allow() -> None:
    with pytest.raises(forge.Refused) as got:
        await forge.post_status("https://[64:ff9b::7f00:1]/s", {}, Allow())
    said = str(got.value)
    assert "127.0.0.1, a loopback address" in said and "not a public address" in said
    assert "CRYOPG_EGRESS_ALLOW" in said


async def test_a_commit_status_to_an_allowed_loopback_receiver_is_sent(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from aiohttp import web

    got: list[Any] = []

    async def take(request: web.Request) -> web.Response:
        got.append((request.host, await request.json()))
        return web.json_response({}, status=201)

    app = web.Application()
    app.router.add_post("/s", take)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        monkeypatch.setenv("CRYOPG_EGRESS_ALLOW", "127.0.0.0/8")
        await forge.post_status(f"http://127.0.0.1:{port}/s", {"state": "success"})
        assert got == [(f"127.0.0.1:{port}", {"state": "success"})]
        monkeypatch.delenv("CRYOPG_EGRESS_ALLOW")
        with pytest.raises(forge.Refused, match="must be https"):
            await forge.post_status(f"http://127.0.0.1:{port}/s", {"state": "success"})
        with pytest.raises(forge.Refused, match="loopback"):
            await forge.post_status(f"https://127.0.0.1:{port}/s", {"state": "success"})
        assert len(got) == 1
    finally:
        await runner.cleanup()
