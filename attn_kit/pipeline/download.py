"""Checked, resumable downloads for the recipes (stdlib only): :func:`fetch`."""
import hashlib
import json
import os
import re
import stat
import time
from dataclasses import dataclass
from http.client import HTTPException
from pathlib import Path
from typing import List, Optional, Tuple
from urllib.error import HTTPError
from urllib.parse import urlsplit
from urllib.request import ProxyHandler, Request, build_opener, url2pathname, urlopen

from ..cli import UserError, write_json_atomic
from .progress import clock_text

TIMEOUT = 60  # seconds without data before a connection counts as broken
# The most a download of unknown size (no published size, no Content-Length) may bring: WMT14's largest
# archives (the UN corpus, giga-fren) are under 3 GB; a server that never stops would fill the disk.
UNKNOWN_SIZE_CAP = 8 << 30
USER_AGENT = "attn_plugin-recipes (python urllib)"


@dataclass
class RemoteFile:
    name: str                     # local file name
    url: str                      # canonical public URL
    size: Optional[int] = None
    sha256: Optional[str] = None
    md5: Optional[str] = None     # sacreBLEU publishes md5 only for the test sets
    note: str = ""


def mirror_url(url: str, mirror: Optional[str]) -> str:
    """``url`` with its scheme and host replaced by ``mirror`` (path kept); a mirror without ``://`` is a local
    folder and the result a local path."""
    if not mirror:
        return url
    parts = urlsplit(url)
    path = parts.path + (f"?{parts.query}" if parts.query else "")
    if "://" not in mirror:
        return str(Path(mirror) / path.lstrip("/"))
    return mirror.rstrip("/") + path


def shown(url: str) -> str:
    """``url`` as messages print it: a password in it (a mirror's http://user:secret@host/) as ***."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return parts._replace(netloc=netloc).geturl()


def sha256_of(path) -> str:
    return _hashes(Path(path), md5=False)[0]


def _hashes(path: Path, md5: bool, chunk: int = 1 << 20):
    """(sha256, md5 or None) of ``path`` in one streamed pass."""
    sha, mdh = hashlib.sha256(), hashlib.md5() if md5 else None
    with open(path, "rb") as f:
        while block := f.read(chunk):
            sha.update(block)
            if mdh:
                mdh.update(block)
    return sha.hexdigest(), mdh.hexdigest() if mdh else None


def read_json_or(path: Path, default=None):
    """The JSON file ``path``, or ``default`` where it cannot be read or parsed."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return default


def record_path(dest_dir, name: str) -> Path:
    """A download's record beside it: ``DEST/.verified/NAME.json`` (as verified, and the transfer's time)."""
    return Path(dest_dir) / ".verified" / f"{name}.json"


def fetch(rf: RemoteFile, dest_dir: Path, mirror: Optional[str] = None, log=print, chunk=1 << 20) -> Path:
    """Download ``rf`` to ``dest_dir/rf.name``, verified; return that path. The transfer goes to ``NAME.partial``,
    renamed once size and checksums match; a broken one resumes (HTTP ``Range``); a mismatch moves it to
    ``NAME.bad`` (one UserError line). A verified file is recorded (:func:`record_path`) and skipped later
    without hashing; without a published checksum, its first sha256 is checked against later (trust on first
    use). ``mirror``: another base URL or a local folder with the same paths."""
    dest_dir = Path(dest_dir)
    final, partial = dest_dir / rf.name, dest_dir / f"{rf.name}.partial"
    sidecar = record_path(dest_dir, rf.name)
    rec = read_json_or(sidecar, {})
    here = final.exists()  # a file already downloaded: a mismatch means it changed here, not at the server
    if here:
        st = final.stat()
        if (rec.get("size"), rec.get("mtime_ns")) == (st.st_size, st.st_mtime_ns) and all(
                getattr(rf, k) in (None, rec.get(k)) for k in ("size", "sha256", "md5")):
            log(f"{rf.name}: verified already ({rec.get('checked')}), not downloading again")
            return final
        # Changed since it was verified (or never was): check it again, without the network.
        os.replace(final, partial)
        complete = True
    else:
        dest_dir.mkdir(parents=True, exist_ok=True)
        complete = False
    src = mirror_url(rf.url, mirror)
    size = rf.size if rf.size is not None else rec.get("size")
    sha = rf.sha256 or rec.get("sha256")
    have = partial.stat().st_size if partial.exists() else 0
    if size is not None and not complete and have >= size:
        if have > size:  # longer than the file can be: not a prefix of it
            partial.unlink()
        complete = have == size
    transfer = None  # (bytes, seconds) of this run's transfer, for the dry run's download time
    if not complete:
        here = False
        if "://" in src and not src.startswith("file://"):
            transfer = _from_url(rf, src, partial, log, chunk, mirror)
        else:
            transfer = _from_path(rf, Path(url2pathname(urlsplit(src).path)) if "://" in src else Path(src),
                                  partial, log, chunk)

    actual = partial.stat().st_size
    reject = partial_rejecter(rf, partial, src, final if here else None, None if rf.sha256 else sidecar)
    if size is not None and actual != size:
        reject("size", f"{size} bytes", f"{actual} bytes")
    got_sha, got_md5 = _hashes(partial, md5=bool(rf.md5))
    if sha and got_sha != sha:
        reject("sha256", sha, got_sha)
    if rf.md5 and got_md5 != rf.md5:
        reject("md5", rf.md5, got_md5)
    checked = _checked(rf, bool(sha), got_sha, sidecar, log)
    os.replace(partial, final)
    st = final.stat()
    sidecar.parent.mkdir(exist_ok=True)
    moved = {"bytes": transfer[0], "seconds": round(transfer[1], 6), "from": urlsplit(src).hostname or "a folder"} \
        if transfer else rec.get("transfer")  # a file checked again keeps the measurement of its download
    write_json_atomic(sidecar, {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": got_sha,
                                "md5": got_md5, "url": src, "checked": checked,
                                **({"transfer": moved} if moved else {})})
    return final


def _checked(rf: RemoteFile, recorded: bool, got_sha: str, sidecar: Path, log) -> str:
    """What a verified download was checked against, logged and returned for its record."""
    if rf.sha256 or rf.md5:
        checked = ", ".join(k for k in ("size", "sha256", "md5") if getattr(rf, k))
        log(f"{rf.name}: verified ({checked})")
        return checked
    if recorded:
        log(f"{rf.name}: verified against the sha256 recorded on its first download (none is published)")
        return "the sha256 recorded on its first download"
    log(f"{rf.name}: no published checksum, so not checked; recorded its sha256 {got_sha} in {sidecar}, "
        f"later downloads are checked against it")
    return "no published checksum; sha256 recorded on first download"


def partial_rejecter(rf: RemoteFile, partial: Path, src: str, here: Optional[Path], recorded: Optional[Path]):
    """``reject(kind, expected, actual)``: move ``partial`` to NAME.bad and raise one line naming the file, both
    values and what to do. ``here``: the downloaded file that changed in the download folder (not at the
    server); ``recorded``: the record whose sha256 (none published) the file was checked against."""
    def reject(kind: str, expected: str, actual: str):
        bad = partial.with_name(f"{rf.name}.bad")
        os.replace(partial, bad)
        anchor = f" (the sha256 recorded at its first download, in {recorded})" if recorded and kind == "sha256" else ""
        cause = (f"{here} changed since it was verified" if here else
                 f"the server or mirror sent a different file (from {shown(src)})")
        fix = "run again to download it afresh" + ("" if here else ", or check --mirror") + (
            f"; if the archive was republished, delete {recorded} to record the new one"
            if anchor and not rf.md5 else "")
        raise UserError(f"{rf.name}: {kind} mismatch: expected {expected}{anchor}, got {actual}; {cause}: "
                        f"moved to {bad} and not used: {fix}")
    return reject


def check_download(path, rf: Optional[RemoteFile] = None, log=print):
    """Check a downloaded file before it is read, hashing it again: against ``rf``'s published sha256 and md5
    and the sha256 recorded at its download; a file with neither gets its sha256 recorded now. A mismatch is
    one UserError naming the file, both hashes and what to do; the file is left in place."""
    path = Path(path)
    record = record_path(path.parent, path.name)
    rec = read_json_or(record, {})
    published = rf if rf is not None and (rf.sha256 or rf.md5) else None
    got_sha, got_md5 = _hashes(path, md5=bool(published and published.md5))
    expected = [("sha256", published and published.sha256, got_sha, "the one published"),
                ("md5", published and published.md5, got_md5, "the one published"),
                ("sha256", rec.get("sha256"), got_sha, f"the one recorded at its download, in {record}")]
    for kind, want, got, where in expected:
        if want and got != want:
            again = ("" if published else f", or, if the archive was republished, delete {record} too "
                                          "to record the new one")
            raise UserError(f"{path}: its {kind} is {got}, not {want}, {where}: the file changed since it was "
                            f"downloaded and checked; delete it and run again to download it afresh{again}")
    if not rec.get("sha256"):  # downloaded before records were kept, or put there by hand: record it now
        st = path.stat()
        record.parent.mkdir(exist_ok=True)
        write_json_atomic(record, {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": got_sha,
                                   "checked": "no record before its first read; sha256 recorded then"})
        log(f"{path.name}: {'checked against its published checksum; ' if published else ''}no record of its "
            f"download, so its sha256 {got_sha} is recorded now in {record}; later reads are checked against it")
        return
    log(f"{path.name}: sha256 checked against the one recorded at its download"
        + (" and the published checksum" if published else ""))


def measured_rate(dest_dir) -> Optional[Tuple[int, float, List[str]]]:
    """(bytes, seconds, hosts) of the transfers recorded in ``dest_dir``, or None: the dry run's download rate."""
    total, seconds, hosts = 0, 0.0, []
    for path in sorted((Path(dest_dir) / ".verified").glob("*.json")):
        moved = read_json_or(path, {}).get("transfer") or {}
        if moved.get("bytes") and moved.get("seconds") is not None:
            total, seconds = total + moved["bytes"], seconds + moved["seconds"]
            hosts += [moved.get("from")] if moved.get("from") not in hosts else []
    return (total, seconds, hosts) if total else None


def _network_error(src: str, partial: Path, reason: str) -> UserError:
    kept = partial.stat().st_size if partial.exists() else 0
    then = f"{kept} bytes kept in {partial}, run again to resume" if kept else "run again to retry"
    return UserError(f"download of {shown(src)} failed: {reason}; {then}")


def _from_url(rf: RemoteFile, src: str, partial: Path, log, chunk: int, mirror: Optional[str]):
    have = partial.stat().st_size if partial.exists() else 0
    headers = {"User-Agent": USER_AGENT}
    if have:
        headers["Range"] = f"bytes={have}-"
    try:
        # A mirror on this machine (smoke mode, tests) is reached directly, whatever http_proxy says.
        local = urlsplit(src).hostname in ("127.0.0.1", "localhost", "::1")
        resp = (build_opener(ProxyHandler({})).open if local else urlopen)(Request(src, headers=headers),
                                                                         timeout=TIMEOUT)
    except HTTPError as exc:
        if exc.code == 416 and have:
            total = re.search(r"/(\d+)\s*$", exc.headers.get("Content-Range") or "")  # bytes */TOTAL
            if total and int(total.group(1)) == have:
                return None  # all there already: go on to verify it
            partial.unlink()  # not a prefix of the remote file: start over
            return _from_url(rf, src, partial, log, chunk, mirror)
        hint = " (check --mirror)" if mirror and exc.code == 404 else ""
        raise _network_error(src, partial, f"HTTP {exc.code} {exc.reason}{hint}") from None
    except (OSError, HTTPException) as exc:
        raise _network_error(src, partial, str(getattr(exc, "reason", exc))) from None
    with resp:
        start = have if have and resp.status == 206 and (resp.headers.get("Content-Range") or "").startswith(
            f"bytes {have}-") else 0
        if have and not start:
            log(f"{rf.name}: the server did not resume at byte {have}; downloading it again from the start")
        length = resp.headers.get("Content-Length")
        total = start + int(length) if length and length.isdigit() else rf.size
        return _copy(rf, resp, partial, start, total, log, chunk, src)


def _from_path(rf: RemoteFile, path: Path, partial: Path, log, chunk: int):
    """Copy from a local mirror folder, resuming like a download."""
    if not path.is_file():
        raise UserError(f"{rf.name}: {path} not found in the mirror folder (check --mirror)")
    size = path.stat().st_size
    have = partial.stat().st_size if partial.exists() else 0
    start = have if have <= size else 0
    if not partial.exists():  # as private as the mirror's file (a 0600 one left a 0644 .bad copy)
        os.close(os.open(partial, os.O_WRONLY | os.O_CREAT, stat.S_IMODE(path.stat().st_mode) & 0o666))
    with open(path, "rb") as f:
        f.seek(start)
        return _copy(rf, f, partial, start, size, log, chunk, str(path))


def _copy(rf: RemoteFile, stream, partial: Path, start: int, total: Optional[int], log, chunk: int, src: str):
    """Append ``stream`` to ``partial`` from byte ``start`` (truncating when 0), logging progress every ~5 s or
    10%; return (bytes, seconds) of the transfer. A Ctrl-C leaves what arrived in ``partial``."""
    mb = 1 << 20
    of = f" of {_size(total)}" if total else ""
    log(f"{rf.name}: resuming at {_size(start)}{of} from {shown(src)}" if start else
        f"{rf.name}: downloading {_size(total) + ' ' if total else ''}from {shown(src)}")
    done, t0 = start, time.time()
    last_t, last_tenth = t0, 10 * start // total if total else 0
    known = [n for n in (total, rf.size) if n is not None]  # the Content-Length, the published size
    limit = min(known) if known else UNKNOWN_SIZE_CAP
    error = None
    with open(partial, "ab" if start else "wb") as out:
        while True:
            try:
                block = stream.read(min(chunk, limit - done + 1))
            except (OSError, HTTPException) as exc:
                error = f"{type(exc).__name__}: {exc}".rstrip(": ")
                break
            if not block:
                break
            if done + len(block) > limit:  # more than the file has: nothing of it is kept
                out.close()
                partial.unlink()
                what = (f"the file's {limit} bytes" if known
                        else f"{_size(limit)}, the most a download of unknown size may be")
                raise UserError(f"{rf.name}: {shown(src)} sent more than {what}; stopped, and the partial download "
                                "removed (a broken server or mirror: check --mirror)")
            out.write(block)
            done += len(block)
            now, tenth = time.time(), 10 * done // total if total else 0
            if (now - last_t >= 5 or tenth > last_tenth) and done != total:
                rate = (done - start) / mb / max(now - t0, 1e-6)
                eta = f", ETA {clock_text((total - done) / mb / rate)}" if total and rate > 0 else ""
                log(f"{rf.name}: {done / mb:.1f}{f' / {total / mb:.1f}' if total else ''} MB, {rate:.1f} MB/s{eta}")
                last_t, last_tenth = now, tenth
    if error is None and total and done < total:
        error = f"connection closed after {done} of {total} bytes"
    if error:
        raise _network_error(src, partial, error)
    secs = time.time() - t0
    log(f"{rf.name}: got {_size(done - start)} in {secs:.0f} s ({(done - start) / mb / max(secs, 1e-6):.1f} MB/s)")
    return done - start, secs


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} bytes"
    return f"{n / 1024:.1f} KB" if n < 1024 ** 2 else f"{n / 1024 ** 2:.1f} MB"
