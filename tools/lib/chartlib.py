"""chartlib.py - the dashboard's chart library (uPlot) for a wheel: found or fetched at build
time, checked against package-lock.json, copied into the package (setup.py calls copy_into()).

    copy_into(dest)   uPlot.iife.min.js and uPlot.min.css into dest; ChartLibMissing in one
                      sentence (the build then fails: a wheel without them would serve a
                      History view that cannot draw)

Where the files come from, the first that works:
1. node_modules/uplot of this clone (what `npm ci` installs, tools/setup runs it), when its
   package.json has the version package-lock.json pins;
2. `npm pack uplot@<that version>`: npm fetches the package through its own configuration (its
   registry, its proxy, its cache); the tarball's sha512 must be the lock's "integrity", so
   the wheel carries exactly the files `npm ci` would have installed.
Never a CDN and never a copy in the repository: the pin is package-lock.json's, in one place.
"""

import base64
import hashlib
import json
import os
import shutil
import subprocess
import tarfile
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGE = "uplot"
FILES = ("uPlot.iife.min.js", "uPlot.min.css")  # what the page loads (host/wattlog/serve/web/page.py)


class ChartLibMissing(Exception):
    pass


def pinned(repo=REPO):
    """(version, integrity) of uplot in package-lock.json."""
    path = os.path.join(repo, "package-lock.json")
    try:
        with open(path) as f:
            entry = json.load(f)["packages"]["node_modules/" + PACKAGE]
        return entry["version"], entry["integrity"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ChartLibMissing("%s does not pin %s (%s): the build cannot tell which chart "
                              "library the dashboard needs" % (path, PACKAGE, e)) from None


def _installed(repo, version):
    """node_modules/uplot/dist when it holds the pinned version, else None."""
    home = os.path.join(repo, "node_modules", PACKAGE)
    try:
        with open(os.path.join(home, "package.json")) as f:
            if json.load(f).get("version") != version:
                return None
    except (OSError, ValueError):
        return None
    dist = os.path.join(home, "dist")
    return dist if all(os.path.isfile(os.path.join(dist, n)) for n in FILES) else None


def _packed(version, integrity, work):
    """The files out of `npm pack`'s tarball, checked against the lock's sha512; their folder."""
    npm = shutil.which("npm")
    if npm is None:
        raise ChartLibMissing(
            "the dashboard's chart library, uPlot %s, is not in node_modules and npm is not "
            "installed to fetch it: install npm (sudo apt install npm) or run `npm ci` in this "
            "clone, then build again" % version)
    done = subprocess.run([npm, "pack", "%s@%s" % (PACKAGE, version), "--pack-destination",
                           work, "--silent", "--no-audit", "--no-fund"], capture_output=True,
                          text=True, timeout=300)
    tarballs = [n for n in os.listdir(work) if n.endswith(".tgz")]
    if done.returncode != 0 or len(tarballs) != 1:
        said = (done.stderr.strip().splitlines() or ["exit status %d" % done.returncode])[-1]
        raise ChartLibMissing("npm could not fetch uPlot %s (%s): check npm's registry "
                              "settings, or run `npm ci` in this clone, then build again"
                              % (version, said))
    path = os.path.join(work, tarballs[0])
    algorithm, _, want = integrity.partition("-")
    with open(path, "rb") as f:
        got = base64.b64encode(hashlib.new(algorithm, f.read()).digest()).decode()
    if got != want:
        raise ChartLibMissing("npm's uplot-%s.tgz is not the one package-lock.json pins (%s "
                              "differs): nothing was copied" % (version, algorithm))
    out = os.path.join(work, "dist")
    os.makedirs(out)
    with tarfile.open(path) as tar:
        for name in FILES:
            member = tar.getmember("package/dist/" + name)  # npm packs into package/
            with tar.extractfile(member) as src, open(os.path.join(out, name), "wb") as dst:
                shutil.copyfileobj(src, dst)
    return out


def copy_into(dest, repo=REPO, progress=print):
    """The pinned uPlot's FILES into dest (node_modules, else npm pack); ChartLibMissing."""
    version, integrity = pinned(repo)
    with tempfile.TemporaryDirectory(prefix="wattlog-uplot-") as work:
        source = _installed(repo, version)
        how = "node_modules"
        if source is None:
            source, how = _packed(version, integrity, work), "npm pack"
        os.makedirs(dest, exist_ok=True)
        for name in FILES:
            shutil.copyfile(os.path.join(source, name), os.path.join(dest, name))
    progress("chartlib: uPlot %s from %s into %s" % (version, how, dest))
