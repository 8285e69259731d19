"""A local Hugging Face hub for download tests: real HTTP, real huggingface_hub client.

It serves one model repo from memory with the endpoints huggingface_hub's
``snapshot_download`` and ``hf_hub_download`` use (repo info, file tree, HEAD and ranged GET
of ``resolve/<commit>/<file>``), at a chosen speed, so a download can be watched, timed and
cancelled midway. Start it with the ``local_hub`` fixture (tests/packaging/conftest.py) and
pass ``local_hub.url`` as the ``endpoint``. ``make_hub_repo`` writes a hub cache on disk.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

COMMIT = "0123456789abcdef0123456789abcdef01234567"


class LocalHub:
    """One repo (``repo_id``: ``{path: bytes}``), streamed at ``bytes_per_s``."""

    def __init__(self, repo_id: str, files: dict[str, bytes], bytes_per_s: float) -> None:
        self.repo_id = repo_id
        self.files = files
        self.bytes_per_s = bytes_per_s
        self.bytes_sent = 0
        self.gets: list[tuple[str, int]] = []  # (file, first byte) of each GET of a file
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep pytest output clean
                pass

            def do_HEAD(self):
                self._resolve(body=False)

            def do_GET(self):
                path = self.path.split("?", 1)[0]
                api = f"/api/models/{hub.repo_id}/"
                if path.startswith(api + "revision/"):
                    return self._json({"id": hub.repo_id, "modelId": hub.repo_id, "sha": COMMIT,
                                       "siblings": [{"rfilename": f} for f in hub.files]})
                if path.startswith(api + "tree/"):
                    return self._json([{"type": "file", "path": f, "size": len(d),
                                        "oid": hashlib.sha1(d).hexdigest()}
                                       for f, d in hub.files.items()])
                self._resolve(body=True)

            def _json(self, data) -> None:
                body = json.dumps(data).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _resolve(self, body: bool) -> None:
                match = re.fullmatch(rf"/{re.escape(hub.repo_id)}/resolve/[^/]+/(.+)",
                                     self.path.split("?", 1)[0])
                data = hub.files.get(match.group(1)) if match else None
                if data is None:
                    self.send_response(404)
                    self.send_header("X-Error-Code", "EntryNotFound")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                start = 0
                ranged = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range", ""))
                if ranged:
                    start = int(ranged.group(1))
                self.send_response(206 if ranged else 200)
                self.send_header("X-Repo-Commit", COMMIT)
                self.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
                self.send_header("Content-Length", str(len(data) - start))
                self.send_header("Accept-Ranges", "bytes")
                self.end_headers()
                if not body:
                    return
                hub.gets.append((match.group(1), start))
                step = 256 * 1024
                try:
                    for pos in range(start, len(data), step):
                        self.wfile.write(data[pos:pos + step])
                        hub.bytes_sent += min(step, len(data) - pos)
                        time.sleep(step / hub.bytes_per_s)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client hung up: a cancelled download

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> LocalHub:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()



REV = "a" * 40  # the same in every fake repo: removing one must not touch another


def make_hub_repo(cache: Path, repo_id: str, files: dict[str, int], rev: str = REV) -> Path:
    """A real hub cache layout: blobs, snapshots/<rev>/<file> -> blob, refs/main."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    (repo / "blobs").mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(rev)
    snap = repo / "snapshots" / rev
    snap.mkdir(parents=True)
    for i, (name, size) in enumerate(files.items()):
        blob = repo / "blobs" / f"{i:064x}"
        blob.write_bytes(b"x" * size)
        (snap / name).symlink_to(os.path.relpath(blob, snap))
    return repo
