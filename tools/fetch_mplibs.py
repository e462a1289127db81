"""fetch_mplibs.py - fetch the MicroPython libraries the unix port needs, by version and sha256.

micropython-lib publishes umqtt.simple and unittest on the Python package index as bare source
archives (no setup.py, no pyproject.toml), so pip refuses to install them. We ask the index pip
is configured to use (index-url, then extra-index-url; pip's own default when none is set) for
the archive by its exact file name, check its sha256 against the pin below, and unpack its
modules into a folder that tools put on MICROPYPATH.

    python tools/fetch_mplibs.py DEST        # idempotent: does nothing when DEST is current

The same modules are frozen into the ESP32 firmware, so nothing here is deployed to a plug.
"""

import hashlib
import io
import json
import os
import re
import ssl
import subprocess
import sys
import tarfile
import urllib.parse
import urllib.request

# (project, version, archive sha256, {path inside the archive: path under DEST})
PINS = [
    ("micropython-umqtt.simple", "1.3.4",
     "b6a2520239e3992c63a7de9370ee9b3d9d27819a90359c521f1c0f7ccab8d12f",
     {"umqtt/simple.py": "umqtt/simple.py"}),
    ("micropython-unittest", "0.4",
     "83b4a65c44b2f6382bc3dd8fbbe002b5679dbfc3744b99eaa59802e6fd14cf67",
     {"unittest.py": "unittest.py"}),
]
STAMP = ".fetched.json"


def pip_indexes():
    """Index URLs in the order pip uses them, from pip's own configuration."""
    out = subprocess.run([sys.executable, "-m", "pip", "config", "list"],
                         capture_output=True, text=True, check=False).stdout
    conf = {}
    for line in out.splitlines():
        key, _, value = line.partition("=")
        conf[key.rsplit(".", 1)[-1]] = value.strip().strip("'\"")
    primary = os.environ.get("PIP_INDEX_URL") or conf.get("index-url")
    if not primary:
        from pip._internal.models.index import PyPI  # pip's built-in default index
        primary = PyPI.simple_url
    extra = os.environ.get("PIP_EXTRA_INDEX_URL") or conf.get("extra-index-url", "")
    return [primary] + extra.split()


def ssl_context():
    cafile = os.environ.get("PIP_CERT")
    if not cafile:
        out = subprocess.run([sys.executable, "-m", "pip", "config", "get", "global.cert"],
                             capture_output=True, text=True, check=False).stdout.strip()
        cafile = out or None
    return ssl.create_default_context(cafile=cafile)


def normalise(project):
    return re.sub(r"[-_.]+", "-", project).lower()


def find_archive(index, project, filename, ctx):
    """The absolute URL of `filename` on the index's simple page for `project`, or None."""
    page = index.rstrip("/") + "/" + normalise(project) + "/"
    if page.startswith("file:"):  # a mirrored index on disk: the archives sit in the folder
        path = os.path.join(urllib.request.url2pathname(urllib.parse.urlparse(page).path), filename)
        return urllib.parse.urljoin("file:", urllib.request.pathname2url(path)) \
            if os.path.isfile(path) else None
    try:
        with urllib.request.urlopen(page, timeout=60, context=ctx) as resp:
            html = resp.read().decode("utf-8", "replace")
    except OSError:
        return None
    for href, text in re.findall(r'href="([^"]+)"[^>]*>\s*([^<]+?)\s*<', html):
        if text == filename:
            return urllib.parse.urljoin(page, href.split("#", 1)[0].replace("&amp;", "&"))
    return None


def fetch(project, version, sha256, ctx, indexes):
    filename = "%s-%s.tar.gz" % (project, version)
    for index in indexes:
        url = find_archive(index, project, filename, ctx)
        if url is None:
            continue
        with urllib.request.urlopen(url, timeout=120, context=ctx) as resp:
            data = resp.read()
        got = hashlib.sha256(data).hexdigest()
        if got != sha256:
            raise SystemExit("fetch_mplibs: %s has sha256 %s, expected %s; refusing to use it"
                             % (filename, got, sha256))
        return data
    raise SystemExit("fetch_mplibs: %s was not found on any configured package index (%s); "
                     "check `pip config list`" % (filename, ", ".join(indexes)))


def main():
    if len(sys.argv) != 2:
        raise SystemExit("usage: fetch_mplibs.py DEST")
    dest = sys.argv[1]
    want = {p: v for p, v, _, _ in PINS}
    try:
        with open(os.path.join(dest, STAMP)) as f:
            if json.load(f) == want:
                return
    except (OSError, ValueError):
        pass
    ctx = ssl_context()
    indexes = pip_indexes()
    for project, version, sha256, files in PINS:
        print("fetching %s %s" % (project, version))
        data = fetch(project, version, sha256, ctx, indexes)
        prefix = "%s-%s/" % (project, version)
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            for inner, outer in files.items():
                member = tar.extractfile(prefix + inner)
                target = os.path.join(dest, outer)
                os.makedirs(os.path.dirname(target) or dest, exist_ok=True)
                with open(target, "wb") as out:
                    out.write(member.read())
    with open(os.path.join(dest, STAMP), "w") as f:
        json.dump(want, f)


if __name__ == "__main__":
    main()
