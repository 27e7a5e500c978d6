"""data_prep/common.py downloads against a local HTTP server (no internet here): checksum
verification, resume with HTTP Range, partial-file cleanup, dead-URL messages, mirrors."""

import hashlib
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "data_prep"))

import common  # noqa: E402
from common import PrepError, Source, download  # noqa: E402

DATA = bytes(range(256)) * 40  # 10,240 bytes


class _Handler(BaseHTTPRequestHandler):
    server_version = "test"

    def do_GET(self):  # noqa: N802
        srv = self.server
        srv.requests.append((self.path, self.headers.get("Range")))
        data = srv.files.get(self.path)
        if data is None:
            self.send_error(404, "Not Found")
            return
        start = 0
        rng = self.headers.get("Range")
        if rng and self.path not in srv.ignore_range:
            start = int(rng.split("=", 1)[1].split("-", 1)[0])
            if start >= len(data):
                self.send_error(416, "Range Not Satisfiable")
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            self.send_response(200)
        body = data[start:]
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        cut = srv.drop_after.pop(self.path, None)
        if cut is not None:  # send part of the body, then close the connection
            self.wfile.write(body[:cut])
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.files, srv.requests, srv.drop_after, srv.ignore_range = {}, [], {}, set()
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    srv.base = f"http://127.0.0.1:{srv.server_address[1]}"
    yield srv
    srv.shutdown()
    srv.server_close()


def _source(url, **kw):
    kw.setdefault("sha256", hashlib.sha256(DATA).hexdigest())
    kw.setdefault("size", len(DATA))
    return Source("corpus.tgz", (url,), "https://example.org/corpus-page", checksum_from="test", **kw)


def _log(lines):
    return lines.append


def test_download_verifies_checksum(server, tmp_path):
    server.files["/corpus.tgz"] = DATA
    logs = []
    path = download(_source(server.base + "/corpus.tgz", md5=hashlib.md5(DATA).hexdigest()), tmp_path, _log(logs))
    assert path == tmp_path / "corpus.tgz" and path.read_bytes() == DATA
    assert not (tmp_path / "corpus.tgz.part").exists()
    assert "sha256 + md5 + size" in logs[-1]
    # present: not fetched again
    download(_source(server.base + "/corpus.tgz"), tmp_path, _log(logs))
    assert len(server.requests) == 1


@pytest.mark.parametrize("bad", ["sha256", "md5", "size"])
def test_checksum_mismatch_removes_partial_file(server, tmp_path, bad):
    server.files["/corpus.tgz"] = DATA
    wrong = {"sha256": {"sha256": "0" * 64}, "md5": {"md5": "f" * 32}, "size": {"size": len(DATA) + 1}}[bad]
    with pytest.raises(PrepError) as e:
        download(_source(server.base + "/corpus.tgz", **wrong), tmp_path, _log([]), what="Test corpus")
    msg = str(e.value)
    assert "checksum mismatch for corpus.tgz" in msg and server.base + "/corpus.tgz" in msg
    assert "Test corpus" in msg and "https://example.org/corpus-page" in msg
    if bad == "sha256":
        assert hashlib.sha256(DATA).hexdigest() in msg and "0" * 64 in msg
    assert "removed" in msg
    assert list(tmp_path.iterdir()) == []


def test_resume_with_range_after_interrupted_download(server, tmp_path):
    server.files["/corpus.tgz"] = DATA
    server.drop_after["/corpus.tgz"] = 3000
    with pytest.raises(PrepError) as e:
        download(_source(server.base + "/corpus.tgz"), tmp_path, _log([]))
    part = tmp_path / "corpus.tgz.part"
    assert part.stat().st_size == 3000
    assert "3000 bytes are kept" in str(e.value) and "resume" in str(e.value)
    assert not (tmp_path / "corpus.tgz").exists()
    logs = []
    path = download(_source(server.base + "/corpus.tgz"), tmp_path, _log(logs))
    assert path.read_bytes() == DATA and not part.exists()
    assert server.requests[-1] == ("/corpus.tgz", "bytes=3000-")
    assert any("resuming corpus.tgz.part at byte 3000" in line for line in logs)


def test_server_ignoring_range_restarts_from_zero(server, tmp_path):
    server.files["/corpus.tgz"] = DATA
    server.ignore_range.add("/corpus.tgz")
    (tmp_path / "corpus.tgz.part").write_bytes(b"x" * 500)  # stale bytes
    path = download(_source(server.base + "/corpus.tgz"), tmp_path, _log([]))
    assert path.read_bytes() == DATA
    assert server.requests[-1] == ("/corpus.tgz", "bytes=500-")


def test_complete_partial_file_is_verified(server, tmp_path):
    server.files["/corpus.tgz"] = DATA
    (tmp_path / "corpus.tgz.part").write_bytes(DATA)  # the server answers 416 to bytes=N-
    assert download(_source(server.base + "/corpus.tgz"), tmp_path, _log([])).read_bytes() == DATA


def test_dead_url_names_the_file_and_where_to_get_it(server, tmp_path):
    src = Source(
        "corpus.tgz",
        (server.base + "/gone/corpus.tgz", "http://127.0.0.1:9/corpus.tgz"),
        "https://example.org/corpus-page",
    )
    with pytest.raises(PrepError) as e:
        download(src, tmp_path, _log([]), what="Test corpus")
    msg = str(e.value)
    assert "could not download corpus.tgz" in msg
    assert server.base + "/gone/corpus.tgz: Not Found" in msg
    assert "http://127.0.0.1:9/corpus.tgz" in msg  # every URL tried is listed
    assert "get corpus.tgz from https://example.org/corpus-page" in msg and "--raw-dir" in msg
    assert list(tmp_path.iterdir()) == []


def test_mirror_is_tried_first(server, tmp_path, monkeypatch):
    server.files["/mirror/corpus.tgz"] = DATA
    monkeypatch.setenv(common.MIRROR_ENV, server.base + "/mirror/")
    path = download(_source("http://127.0.0.1:9/corpus.tgz"), tmp_path, _log([]))
    assert path.read_bytes() == DATA
    assert server.requests == [("/mirror/corpus.tgz", None)]


def test_manual_file_says_where_to_get_it(tmp_path):
    src = Source("Gold.tar.gz", (), "https://example.org/form", manual=True)
    with pytest.raises(
        PrepError,
        match=r"Gold.tar.gz cannot be downloaded automatically; get it from "
        r"https://example.org/form and put it into --raw-dir",
    ):
        download(src, tmp_path, _log([]))


def test_unverified_source_says_so(server, tmp_path):
    server.files["/corpus.tgz"] = DATA
    logs = []
    download(Source("corpus.tgz", (server.base + "/corpus.tgz",), "x"), tmp_path, _log(logs))
    assert "no published checksum or size: not verified" in logs[-1]


def test_verify_file_reports_both_values(tmp_path):
    p = tmp_path / "f"
    p.write_bytes(b"abc")
    with pytest.raises(PrepError, match=rf"{p}: size 3 bytes, expected 4 bytes \(doc\)"):
        common.verify_file(p, Source("f", (), "x", size=4, checksum_from="doc"))
    common.verify_file(p, Source("f", (), "x", sha256=hashlib.sha256(b"abc").hexdigest(), size=3))


def test_a_connection_closed_before_the_first_byte_leaves_no_partial_file(server, tmp_path):
    server.files["/corpus.tgz"] = DATA
    server.drop_after["/corpus.tgz"] = 0
    with pytest.raises(PrepError) as e:
        download(_source(server.base + "/corpus.tgz"), tmp_path, _log([]))
    assert f"connection closed after 0 of {len(DATA)} bytes" in str(e.value)
    assert "bytes are kept" not in str(e.value)
    assert list(tmp_path.iterdir()) == []
