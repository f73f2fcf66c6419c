"""attn_kit.pipeline.download against a local mirror (attn_kit.pipeline.mirror): checksums,
resumed and restarted transfers, errors. No internet."""
import hashlib
import json
import os
import tarfile
import threading
import urllib.error
import urllib.request

import pytest

from attn_kit.pipeline.download import RemoteFile, fetch, mirror_url, sha256_of
from attn_kit.pipeline.mirror import RangeRequestHandler, make_tar, serve
from attn_kit.cli import UserError

DATA = os.urandom(300_000)
SHA = hashlib.sha256(DATA).hexdigest()
MD5 = hashlib.md5(DATA).hexdigest()
URL = "http://www.statmt.org/wmt13/data.tgz"
CUT = 100_000


class Recording(RangeRequestHandler):
    """Records each request's Range header; ``cuts`` > 0 drops the connection
    after CUT body bytes (that many times); ``honour_range`` False answers 200."""
    ranges, cuts, honour_range = [], 0, True
    lock = threading.Lock()

    def do_GET(self):
        with self.lock:
            type(self).ranges.append(self.headers.get("Range"))
        super().do_GET()

    def byte_range(self, size):
        return super().byte_range(size) if self.honour_range else None

    def send_body(self, f, length):
        with self.lock:
            cut, type(self).cuts = self.cuts > 0, max(self.cuts - 1, 0)
        if cut:
            self.wfile.write(f.read(CUT))
            self.close_connection = True
        else:
            super().send_body(f, length)


@pytest.fixture
def server(tmp_path):
    root = tmp_path / "mirror"
    (root / "wmt13").mkdir(parents=True)
    (root / "wmt13" / "data.tgz").write_bytes(DATA)

    def start(**attrs):
        handler = type("Handler", (Recording,), {"ranges": [], **attrs})
        base, stop = serve(root, handler=handler)
        started.append(stop)
        return base, handler, stop

    started = []
    yield start
    for stop in started:
        stop()


def quiet(*_):
    pass


def remote(**kw):
    return RemoteFile("data.tgz", URL, **{"size": len(DATA), "sha256": SHA, **kw})


def test_good_file_is_verified_then_skipped_without_network(tmp_path, server):
    base, handler, stop = server()
    out = fetch(remote(md5=MD5), tmp_path / "dl", base, quiet)
    assert out == tmp_path / "dl" / "data.tgz" and out.read_bytes() == DATA
    assert handler.ranges == [None] and not (tmp_path / "dl" / "data.tgz.partial").exists()
    stop()
    lines = []
    assert fetch(remote(md5=MD5), tmp_path / "dl", base, lines.append) == out  # the server is gone
    assert "verified already" in lines[0]


def test_checksum_mismatch_is_refused(tmp_path, server):
    base, _, _ = server()
    wrong = "0" * 64
    with pytest.raises(UserError) as err:
        fetch(remote(sha256=wrong), tmp_path, base, quiet)
    msg = str(err.value)
    assert "\n" not in msg and "data.tgz" in msg and wrong in msg and SHA in msg and "--mirror" in msg
    assert not (tmp_path / "data.tgz").exists() and (tmp_path / "data.tgz.bad").read_bytes() == DATA
    with pytest.raises(UserError, match="md5 mismatch"):
        fetch(remote(md5="f" * 32), tmp_path, base, quiet)


def test_size_mismatch_is_refused(tmp_path, server):
    base, _, _ = server()
    with pytest.raises(UserError, match=f"size mismatch: expected {len(DATA) + 1} bytes, got {len(DATA)} bytes"):
        fetch(remote(size=len(DATA) + 1), tmp_path, base, quiet)
    assert not (tmp_path / "data.tgz").exists() and (tmp_path / "data.tgz.bad").exists()


def test_interrupted_download_is_resumed(tmp_path, server):
    base, handler, _ = server(cuts=1)
    with pytest.raises(UserError, match="run again to resume") as err:
        fetch(remote(), tmp_path, base, quiet, chunk=8192)
    assert "\n" not in str(err.value) and f"{base}/wmt13/data.tgz" in str(err.value)
    assert (tmp_path / "data.tgz.partial").stat().st_size == CUT
    lines = []
    assert fetch(remote(), tmp_path, base, lines.append).read_bytes() == DATA
    assert handler.ranges == [None, f"bytes={CUT}-"]
    assert any("resuming" in line for line in lines)


def test_server_ignoring_range_restarts_from_zero(tmp_path, server):
    base, handler, _ = server(honour_range=False)
    (tmp_path / "data.tgz.partial").write_bytes(b"x" * CUT)  # a stale prefix that must not be kept
    lines = []
    assert fetch(remote(), tmp_path, base, lines.append).read_bytes() == DATA
    assert handler.ranges == [f"bytes={CUT}-"] and any("from the start" in line for line in lines)


def test_complete_partial_is_verified_after_416(tmp_path, server):
    base, handler, _ = server()
    (tmp_path / "data.tgz.partial").write_bytes(DATA)
    lines = []
    fetch(remote(size=None, sha256=None), tmp_path, base, lines.append)  # no size known: asks the server
    assert handler.ranges == [f"bytes={len(DATA)}-"] and (tmp_path / "data.tgz").read_bytes() == DATA
    assert any("no published checksum" in line for line in lines)  # trust on first use is said


def test_missing_file_is_one_line_error(tmp_path, server):
    base, _, _ = server()
    rf = RemoteFile("nope.tgz", "http://www.statmt.org/wmt14/nope.tgz")
    with pytest.raises(UserError) as err:
        fetch(rf, tmp_path, base, quiet)
    msg = str(err.value)
    assert "\n" not in msg and f"{base}/wmt14/nope.tgz" in msg and "404" in msg
    assert not list(tmp_path.glob("nope.tgz*"))


def one_line(err) -> str:
    msg = str(err.value)
    assert "\n" not in msg
    return msg


def test_a_file_without_a_published_checksum_is_recorded_at_its_first_download_and_checked_at_every_use(
        tmp_path, server):
    """Issue 50: an archive with no published checksum gets its sha256 recorded at its first download
    (the record beside it, .verified/NAME.json), and every later use is checked against it: a later run
    that finds the file (unchanged: accepted; changed: one line naming both hashes, the file set aside),
    its read by the extract stage (check_download: one line, the file left for the user to delete), and a
    later download from a server whose file changed (one line naming the record to delete)."""
    from attn_kit.pipeline.download import check_download, record_path

    base, _, _ = server()
    rf, dl = RemoteFile("data.tgz", URL), tmp_path / "dl"
    lines = []
    path = fetch(rf, dl, base, lines.append)
    record = json.loads(record_path(dl, "data.tgz").read_text())
    assert record_path(dl, "data.tgz") == dl / ".verified" / "data.tgz.json"
    assert record["sha256"] == hashlib.sha256(DATA).hexdigest() and record["size"] == len(DATA)
    assert any(f"recorded its sha256 {SHA}" in line for line in lines)
    # unchanged: accepted by a later run and by the extract stage's read
    lines = []
    assert fetch(rf, dl, base, lines.append) == path and "verified already" in lines[0]
    check_download(path, None, lines.append)
    assert "checked against the one recorded at its download" in lines[-1]
    # changed in the download folder (another mtime): a later run refuses it in one line, sets it aside
    changed = bytes(b ^ 1 for b in DATA[:10]) + DATA[10:]
    path.write_bytes(changed)
    with pytest.raises(UserError) as err:
        fetch(rf, dl, base, quiet)
    msg = one_line(err)
    assert msg.startswith("data.tgz: sha256 mismatch: expected " + SHA) and hashlib.sha256(changed).hexdigest() in msg
    assert f"{path} changed since it was verified" in msg and "run again to download it afresh" in msg
    assert (dl / "data.tgz.bad").read_bytes() == changed and not path.exists()
    assert fetch(rf, dl, base, quiet).read_bytes() == DATA  # run again: downloaded afresh, checked, accepted
    # changed in place with its size and mtime kept: the stat matches, but the extract stage's read hashes it
    st = path.stat()
    path.write_bytes(changed)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(UserError) as err:
        check_download(path, None, quiet)
    msg = one_line(err)
    assert msg.startswith(f"{path}: its sha256 is {hashlib.sha256(changed).hexdigest()}, not {SHA}, the one recorded")
    assert "delete it and run again" in msg and str(record_path(dl, "data.tgz")) in msg
    assert path.read_bytes() == changed  # left for the user
    # the server's file changed: a fresh download is refused against the record, which the line names
    path.unlink()
    (tmp_path / "mirror" / "wmt13" / "data.tgz").write_bytes(DATA[::-1])
    with pytest.raises(UserError) as err:
        fetch(rf, dl, base, quiet)
    msg = one_line(err)
    assert f"expected {SHA} (the sha256 recorded at its first download, in {record_path(dl, 'data.tgz')})" in msg
    assert hashlib.sha256(DATA[::-1]).hexdigest() in msg and "the server or mirror sent a different file" in msg
    assert f"delete {record_path(dl, 'data.tgz')} to record the new one" in msg


def test_the_extract_stages_check_uses_the_published_checksum_and_records_a_file_it_never_saw(tmp_path):
    """check_download: a published checksum that differs is one line; a file with no record (put there
    by hand) is hashed and recorded at its first read, and checked against that from then on."""
    from attn_kit.pipeline.download import check_download, record_path

    path = tmp_path / "data.tgz"
    path.write_bytes(DATA)
    with pytest.raises(UserError) as err:
        check_download(path, remote(sha256="0" * 64), quiet)
    assert one_line(err).startswith(f"{path}: its sha256 is {SHA}, not {'0' * 64}, the one published")
    with pytest.raises(UserError, match=f"its md5 is {MD5}, not {'f' * 32}, the one published"):
        check_download(path, remote(md5="f" * 32), quiet)
    assert not record_path(tmp_path, "data.tgz").exists()
    lines = []
    check_download(path, None, lines.append)
    assert json.loads(record_path(tmp_path, "data.tgz").read_text())["sha256"] == SHA and "recorded now" in lines[0]
    path.write_bytes(DATA[::-1])
    with pytest.raises(UserError, match="the file changed since it was downloaded and checked"):
        check_download(path, None, quiet)


def test_a_download_records_its_transfer_and_the_measured_rate_sums_them(tmp_path, server):
    """The dry run's measured download rate: each record keeps its file's transfer (bytes, seconds,
    host); measured_rate sums them over the download folder."""
    from attn_kit.pipeline.download import measured_rate, record_path

    base, _, _ = server()
    fetch(remote(), tmp_path, base, quiet)
    moved = json.loads(record_path(tmp_path, "data.tgz").read_text())["transfer"]
    assert moved["bytes"] == len(DATA) and moved["from"] == "127.0.0.1"
    for name, size, seconds in (("a.tgz", 300_000_000, 20.0), ("b.tgz", 100_000_000, 5.0)):
        record_path(tmp_path, name).write_text(json.dumps({"transfer": {"bytes": size, "seconds": seconds,
                                                                        "from": "www.statmt.org"}}))
    total, seconds, hosts = measured_rate(tmp_path)
    assert total == 400_000_000 + len(DATA) and seconds == pytest.approx(25.0 + moved["seconds"])
    assert hosts == ["www.statmt.org", "127.0.0.1"]  # in the records' order: a, b, data
    assert measured_rate(tmp_path / "none") is None


def test_every_wmt14_training_archive_has_a_published_size_and_sha256():
    """The UN corpus and giga-fren had none: their size and sha256 are TFDS's WMT15 builder's, which
    downloads the same two archives (2365634246 and 2595102720 bytes)."""
    from attn_kit.recipes.wmt14_data import FILES, PAIRS

    for key in {k for pair in PAIRS.values() for k, _, _ in pair.train}:
        assert FILES[key].size and len(FILES[key].sha256) == 64, key
    assert (FILES["un"].size, FILES["giga_fren"].size) == (2365634246, 2595102720)


def test_local_folder_mirror(tmp_path):
    root = tmp_path / "mirror"
    (root / "wmt13").mkdir(parents=True)
    (root / "wmt13" / "data.tgz").write_bytes(DATA)
    (tmp_path / "data.tgz.partial").write_bytes(DATA[:CUT])
    assert fetch(remote(), tmp_path, str(root), quiet).read_bytes() == DATA


def test_range_requests_and_mirror_url(tmp_path, server):
    base, _, _ = server()
    assert mirror_url("http://www.statmt.org/wmt13/x.tgz", None) == "http://www.statmt.org/wmt13/x.tgz"
    assert mirror_url("http://www.statmt.org/wmt13/x.tgz", "http://127.0.0.1:8000/base/") == \
        "http://127.0.0.1:8000/base/wmt13/x.tgz"
    assert mirror_url("http://www.statmt.org/wmt13/x.tgz", "/srv/wmt") == "/srv/wmt/wmt13/x.tgz"
    open_ = urllib.request.build_opener(urllib.request.ProxyHandler({})).open
    req = urllib.request.Request(f"{base}/wmt13/data.tgz", headers={"Range": "bytes=10-19"})
    with open_(req) as resp:
        assert resp.status == 206 and resp.read() == DATA[10:20]
        assert resp.headers["Content-Range"] == f"bytes 10-19/{len(DATA)}"
    with pytest.raises(urllib.error.HTTPError) as err:
        open_(urllib.request.Request(f"{base}/wmt13/data.tgz", headers={"Range": f"bytes={len(DATA)}-"}))
    assert err.value.code == 416 and err.value.headers["Content-Range"] == f"bytes */{len(DATA)}"


def test_make_tar_is_deterministic(tmp_path):
    members = {"training/b.en": b"hello\n", "a.de": b"hallo\n"}
    for gz in (True, False):
        make_tar(tmp_path / "1", members, gz)
        make_tar(tmp_path / "2", dict(reversed(members.items())), gz)
        assert sha256_of(tmp_path / "1") == sha256_of(tmp_path / "2")
        with tarfile.open(tmp_path / "1") as tar:
            assert tar.getnames() == ["a.de", "training/b.en"]
            assert tar.extractfile("training/b.en").read() == b"hello\n"


def test_ctrl_c_keeps_the_partial_file(tmp_path, server):
    base, handler, _ = server()

    progress = []

    def interrupt_on_progress(line):
        if " MB/s" in line and "got" not in line:
            progress.append(line)
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        fetch(remote(), tmp_path, base, interrupt_on_progress, chunk=8192)
    assert ", ETA " in progress[0]  # the size is known: the time left at the rate so far
    kept = (tmp_path / "data.tgz.partial").stat().st_size
    assert 0 < kept < len(DATA)
    assert fetch(remote(), tmp_path, base, quiet).read_bytes() == DATA
    assert handler.ranges == [None, f"bytes={kept}-"]


class Endless(Recording):
    """A mirror that never stops sending (and says no length)."""

    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        try:
            while True:
                self.wfile.write(b"\0" * 65536)
        except OSError:  # the client hung up
            pass


def test_a_server_that_never_stops_sending_is_cut_off_at_the_files_size(tmp_path, server, monkeypatch):
    """A local mirror serving an endless stream made a 3.7 GB .partial in 15 s for a 7,604-byte archive,
    the progress line reading "3020.0 / 0.0 MB, ETA 0s". The download stops as soon as it passes the
    published size (or the Content-Length, or a cap when neither is known), one line, no .partial left."""
    from attn_kit.pipeline import download

    base, _, _ = server(do_GET=Endless.do_GET)
    with pytest.raises(UserError, match=r"^data.tgz: .* sent more than the file's 7604 bytes; stopped, and the "
                                        r"partial download removed") as err:
        fetch(remote(size=7604), tmp_path, base, quiet)
    assert "\n" not in str(err.value) and not list(tmp_path.glob("data.tgz*"))
    monkeypatch.setattr(download, "UNKNOWN_SIZE_CAP", 200_000)
    with pytest.raises(UserError, match=r"sent more than 195.3 KB, the most a download of unknown size may be"):
        fetch(remote(size=None, sha256=None), tmp_path, base, quiet)
    assert not list(tmp_path.glob("data.tgz*"))


def test_an_archive_that_unpacks_to_far_more_than_its_size_or_holds_a_link_is_one_line(tmp_path):
    """A 310 KB gzip member unpacked to 300 MB with no limit; a wanted member that is a link was a
    traceback. Extraction stops at MAX_EXPANSION times the archive's size, nothing of the member kept."""
    import gzip
    import io

    from attn_kit.pipeline.text import MAX_EXPANSION, extract_members

    bomb = gzip.compress(b"\0" * (8 << 20))  # 8 MB of zeros: a few KB
    archive = tmp_path / "a.tgz"
    with tarfile.open(archive, "w:gz") as tar:
        info = tarfile.TarInfo("corpus.en.gz")
        info.size = len(bomb)
        tar.addfile(info, io.BytesIO(bomb))
        link = tarfile.TarInfo("corpus.de")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(link)
    assert 8 << 20 > MAX_EXPANSION * archive.stat().st_size + (1 << 20)
    with pytest.raises(UserError, match=rf"a.tgz: its members unpack to more than {MAX_EXPANSION} times its size"):
        extract_members(archive, {"corpus.en.gz": tmp_path / "corpus.en"})
    assert not list(tmp_path.glob("corpus.en*"))
    with pytest.raises(UserError, match="member corpus.de is not a file"):
        extract_members(archive, {"corpus.de": tmp_path / "corpus.de"})
    assert not (tmp_path / "corpus.de").exists()


def test_a_mirrors_password_is_never_printed_and_a_private_file_stays_private(tmp_path, server):
    """A mirror URL with a password echoed it in the error; a local mirror's symlink to a 0600 file left a
    0644 .bad copy of it."""
    from attn_kit.pipeline.download import shown

    assert shown("http://me:s3cret@127.0.0.1:9/wmt13/x.tgz") == "http://me:***@127.0.0.1:9/wmt13/x.tgz"
    with pytest.raises(UserError) as err:
        fetch(remote(), tmp_path, "http://me:s3cret@127.0.0.1:9", quiet)  # nothing listens on port 9
    assert "s3cret" not in str(err.value) and "me:***@127.0.0.1:9" in str(err.value)
    private = tmp_path / "local" / "wmt13"
    private.mkdir(parents=True)
    (private / "secret.tgz").write_bytes(DATA)
    os.chmod(private / "secret.tgz", 0o600)
    (private / "data.tgz").symlink_to(private / "secret.tgz")
    with pytest.raises(UserError, match="sha256 mismatch"):
        fetch(remote(sha256="0" * 64), tmp_path / "dl", str(tmp_path / "local"), quiet)
    assert os.stat(tmp_path / "dl" / "data.tgz.bad").st_mode & 0o777 == 0o600


def test_a_member_in_an_archive_twice_is_taken_from_its_last_copy_as_tar_does(tmp_path):
    """The extraction took a member's first copy where tar (and any user checking with it) takes the last."""
    import io

    from attn_kit.pipeline.text import extract_members

    archive = tmp_path / "a.tgz"
    with tarfile.open(archive, "w:gz") as tar:
        for text in (b"first\n", b"other\n", b"last\n"):
            info = tarfile.TarInfo("corpus.en" if text != b"other\n" else "other.en")
            info.size = len(text)
            tar.addfile(info, io.BytesIO(text))
    extract_members(archive, {"corpus.en": tmp_path / "corpus.en"})
    assert (tmp_path / "corpus.en").read_bytes() == b"last\n"
