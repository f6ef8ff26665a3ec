#!/usr/bin/env python3
"""Fake package registries on 127.0.0.1 for tests/registries.rs.

    python3 serve.py KIND DIR

KIND is one of:
  git    a git repository served over smart HTTP (`git http-backend` as CGI)
         at /repo.git
  pypi   a PEP 503 simple index at /simple/ with one wheel, capstan-tiny 1.0.0
  npm    an npm registry with one package, capstan-tiny 1.0.0 (packument at
         /capstan-tiny, tarball at /capstan-tiny/-/capstan-tiny-1.0.0.tgz)
  cargo  a sparse cargo registry at /index/ (config.json, the index file of
         capstan-tiny 0.1.0) with its .crate under /api/v1/crates/

The artifacts are built into DIR. The server binds 127.0.0.1 on a free port,
prints `PORT <n>` on stdout once it listens, logs each request line on stderr
(`REQ <method> <path>`), and exits when its stdin closes (the test dropping
it). Standard library only.
"""

import base64
import gzip
import hashlib
import http.server
import io
import json
import os
import subprocess
import sys
import tarfile
import threading
import zipfile

NAME = "capstan-tiny"


def tar_gz(files):
    """A .tar.gz of {path: bytes}, with fixed metadata."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for path, data in files.items():
            info = tarfile.TarInfo(path)
            info.size = len(data)
            info.mode = 0o644
            info.mtime = 0
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue(), mtime=0)


def build_git(d):
    src = os.path.join(d, "src")
    os.makedirs(src)
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t",
               GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t")
    run = lambda *a, cwd=src: subprocess.run(a, cwd=cwd, env=env, check=True,
                                             stdout=subprocess.DEVNULL)
    run("git", "init", "-q", "-b", "main")
    with open(os.path.join(src, "README"), "w") as f:
        f.write("served by the fake git server\n")
    run("git", "add", "README")
    run("git", "commit", "-q", "-m", "first")
    run("git", "clone", "-q", "--bare", src, os.path.join(d, "repo.git"), cwd=d)
    run("git", "config", "http.receivepack", "false", cwd=os.path.join(d, "repo.git"))


def build_pypi(d):
    dist = "capstan_tiny"
    meta = f"Metadata-Version: 2.1\nName: {NAME}\nVersion: 1.0.0\n\n".encode()
    wheel_meta = b"Wheel-Version: 1.0\nGenerator: capstan-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    files = {
        f"{dist}/__init__.py": b"GREETING = 'hello from the fake index'\n",
        f"{dist}-1.0.0.dist-info/METADATA": meta,
        f"{dist}-1.0.0.dist-info/WHEEL": wheel_meta,
    }
    record = "".join(
        f"{p},sha256={base64.urlsafe_b64encode(hashlib.sha256(b).digest()).rstrip(b'=').decode()},{len(b)}\n"
        for p, b in files.items()
    ) + f"{dist}-1.0.0.dist-info/RECORD,,\n"
    files[f"{dist}-1.0.0.dist-info/RECORD"] = record.encode()
    wheel = f"{dist}-1.0.0-py3-none-any.whl"
    os.makedirs(os.path.join(d, "files"))
    with zipfile.ZipFile(os.path.join(d, "files", wheel), "w") as z:
        for p, b in files.items():
            z.writestr(p, b)
    digest = hashlib.sha256(open(os.path.join(d, "files", wheel), "rb").read()).hexdigest()
    pages = {
        "/simple/": f'<!DOCTYPE html><html><body><a href="/simple/{NAME}/">{NAME}</a></body></html>',
        f"/simple/{NAME}/": f'<!DOCTYPE html><html><body><a href="/files/{wheel}#sha256={digest}">{wheel}</a></body></html>',
    }
    return pages


def build_npm(d, port):
    pkg = json.dumps({"name": NAME, "version": "1.0.0", "main": "index.js"}).encode()
    tgz = tar_gz({"package/package.json": pkg,
                  "package/index.js": b"module.exports = 'hello from the fake registry';\n"})
    integrity = "sha512-" + base64.b64encode(hashlib.sha512(tgz).digest()).decode()
    tarball = f"/{NAME}/-/{NAME}-1.0.0.tgz"
    packument = {
        "name": NAME,
        "dist-tags": {"latest": "1.0.0"},
        "versions": {"1.0.0": {
            "name": NAME, "version": "1.0.0", "main": "index.js",
            "dist": {"tarball": f"http://127.0.0.1:{port}{tarball}",
                     "shasum": hashlib.sha1(tgz).hexdigest(),
                     "integrity": integrity},
        }},
    }
    return {f"/{NAME}": json.dumps(packument).encode(), tarball: tgz}


def build_cargo(d, port):
    manifest = (f'[package]\nname = "{NAME}"\nversion = "0.1.0"\nedition = "2021"\n'
                f'description = "a crate served by the fake registry"\nlicense = "MIT"\n').encode()
    crate = tar_gz({f"{NAME}-0.1.0/Cargo.toml": manifest,
                    f"{NAME}-0.1.0/src/lib.rs": b"pub fn hello() -> &'static str { \"hello\" }\n"})
    line = json.dumps({"name": NAME, "vers": "0.1.0", "deps": [],
                       "cksum": hashlib.sha256(crate).hexdigest(), "features": {},
                       "yanked": False, "v": 1})
    dl = f"http://127.0.0.1:{port}/api/v1/crates"
    return {
        "/index/config.json": json.dumps({"dl": dl}).encode(),
        # Names of four or more characters: first two / next two / name.
        f"/index/{NAME[:2]}/{NAME[2:4]}/{NAME}": (line + "\n").encode(),
        f"/api/v1/crates/{NAME}/0.1.0/download": crate,
    }


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    files = {}
    kind = ""
    root = ""

    def log_message(self, fmt, *args):
        pass

    def reply(self, code, body, ctype="application/octet-stream"):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        sys.stderr.write(f"REQ {self.command} {self.path}\n")
        sys.stderr.flush()
        if self.kind == "git":
            return self.cgi()
        path = self.path.split("?", 1)[0]
        if self.kind == "pypi" and path.startswith("/files/"):
            f = os.path.join(self.root, "files", os.path.basename(path))
            if os.path.isfile(f):
                return self.reply(200, open(f, "rb").read())
        body = self.files.get(path)
        if body is None:
            return self.reply(404, b"not found\n", "text/plain")
        if isinstance(body, str):
            return self.reply(200, body.encode(), "text/html")
        ctype = "application/json" if path.endswith(".json") or path == f"/{NAME}" else "application/octet-stream"
        self.reply(200, body, ctype)

    def do_POST(self):
        sys.stderr.write(f"REQ {self.command} {self.path}\n")
        sys.stderr.flush()
        if self.kind == "git":
            return self.cgi()
        self.reply(404, b"not found\n", "text/plain")

    def cgi(self):
        """Smart HTTP: hand the request to `git http-backend`."""
        path, _, query = self.path.partition("?")
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "GIT_PROJECT_ROOT": self.root,
            "GIT_HTTP_EXPORT_ALL": "1",
            "REQUEST_METHOD": self.command,
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "REMOTE_ADDR": "127.0.0.1",
            "GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
        }
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
            env["CONTENT_LENGTH"] = str(len(body))
        out = subprocess.run(["git", "http-backend"], input=body, env=env,
                             stdout=subprocess.PIPE, check=False).stdout
        head, _, payload = out.partition(b"\r\n\r\n")
        if not _:
            head, _, payload = out.partition(b"\n\n")
        status = 200
        headers = []
        for line in head.decode("latin-1").splitlines():
            k, _, v = line.partition(":")
            if k.lower() == "status":
                status = int(v.strip().split()[0])
            elif k:
                headers.append((k, v.strip()))
        self.send_response(status)
        for k, v in headers:
            if k.lower() != "content-length":
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


def main():
    kind, d = sys.argv[1], sys.argv[2]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    port = server.server_address[1]
    Handler.kind, Handler.root = kind, d
    if kind == "git":
        build_git(d)
    elif kind == "pypi":
        Handler.files = build_pypi(d)
    elif kind == "npm":
        Handler.files = build_npm(d, port)
    elif kind == "cargo":
        Handler.files = build_cargo(d, port)
    else:
        sys.exit(f"unknown registry kind {kind!r}: git, pypi, npm or cargo")
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(f"PORT {port}", flush=True)
    sys.stdin.read()  # until the test closes it
    server.shutdown()


if __name__ == "__main__":
    main()
