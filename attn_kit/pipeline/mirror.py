"""A local stand-in for the download hosts: an HTTP server with Range support and deterministic tar archives
to put on it, for the recipes' smoke mode (tiny archives laid out like WMT's) and the download tests."""
import gzip
import io
import os
import re
import tarfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable, Dict, Optional, Tuple
from urllib.parse import unquote, urlsplit


class RangeRequestHandler(BaseHTTPRequestHandler):
    """GET/HEAD of the files under ``server.root``, honouring ``Range: bytes=A-B`` (206, or 416 past the end),
    which SimpleHTTPRequestHandler ignores. Tests override :meth:`byte_range` and :meth:`send_body`."""

    def do_GET(self):
        self._serve(body=True)

    def do_HEAD(self):
        self._serve(body=False)

    def log_message(self, format, *args):
        pass  # quiet: the recipe's own log says what is fetched

    def byte_range(self, size: int) -> Optional[Tuple[int, int]]:
        """Inclusive (first, last) byte asked for, None for the whole file (also for several ranges, as HTTP
        allows); ValueError when the range cannot be satisfied."""
        m = re.fullmatch(r"bytes=(\d*)-(\d*)", (self.headers.get("Range") or "").strip())
        if not m or m.group(1) == m.group(2) == "":
            return None
        if m.group(1) == "":  # the last N bytes
            if int(m.group(2)) == 0:
                raise ValueError
            return max(size - int(m.group(2)), 0), size - 1
        first, last = int(m.group(1)), int(m.group(2)) if m.group(2) else size - 1
        if first >= size or last < first:
            raise ValueError
        return first, min(last, size - 1)

    def send_body(self, f, length: int):
        """Copy ``length`` bytes of ``f`` (positioned already) to the client."""
        while length > 0 and (block := f.read(min(length, 1 << 20))):
            self.wfile.write(block)
            length -= len(block)

    def _serve(self, body: bool):
        root = Path(self.server.root).resolve()
        path = (root / unquote(urlsplit(self.path).path).lstrip("/")).resolve()
        if not path.is_file() or (root not in path.parents):
            self.send_error(404, "File not found")
            return
        size = path.stat().st_size
        try:
            wanted = self.byte_range(size)
        except ValueError:
            self.send_response(416)
            self.send_header("Content-Range", f"bytes */{size}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        first, last = wanted or (0, size - 1)
        self.send_response(206 if wanted else 200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(last - first + 1))
        if wanted:
            self.send_header("Content-Range", f"bytes {first}-{last}/{size}")
        self.end_headers()
        if body:
            with open(path, "rb") as f:
                f.seek(first)
                try:
                    self.send_body(f, last - first + 1)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client went away (a test, or Ctrl-C): nothing to report


def serve(root: Path, host: str = "127.0.0.1", port: int = 0,
          handler=RangeRequestHandler) -> Tuple[str, Callable[[], None]]:
    """Serve the files under ``root`` from a daemon thread (``port`` 0: a free one); return (base URL, stop)."""
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    server.root = Path(root)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), name=f"mirror {root}", daemon=True)
    thread.start()

    def stop():
        server.shutdown()
        server.server_close()
        thread.join()

    return f"http://{host}:{server.server_address[1]}", stop


def make_tar(out: Path, members: Dict[str, bytes], gz: bool):
    """Write a tar (gzipped when ``gz``) holding ``members`` (name -> bytes), deterministic (sorted names,
    mtime 0, fixed owner and mode): the same members always give the same bytes."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name in sorted(members):
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(members[name]), 0, 0o644
            tar.addfile(info, io.BytesIO(members[name]))
    data = gzip.compress(buf.getvalue(), mtime=0) if gz else buf.getvalue()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".partial")
    tmp.write_bytes(data)
    os.replace(tmp, out)
