"""test_durable.py - a file durable.py writes is created with the mode asked for, never with
the mode of a temp file a crash left behind, and replaces the old one whole."""

import os

from wattlog.store import durable


def test_a_stale_temp_file_does_not_lend_its_mode(tmp_path, monkeypatch):
    """A crash can leave <file>.tmp behind, 0644 from an older version: opening it again with
    O_TRUNC would keep that mode, so a secret written through it would be world-readable."""
    path = tmp_path / "credentials.json"
    stale = tmp_path / "credentials.json.tmp"
    stale.write_text('{"old": "secret"}')
    os.chmod(stale, 0o644)
    seen = []
    real_replace = os.replace

    def spy(src, dst):
        seen.append(os.stat(src).st_mode & 0o777)
        return real_replace(src, dst)
    monkeypatch.setattr(os, "replace", spy)
    durable.write_json(str(path), {"user": "password"}, mode=0o600)
    assert seen == [0o600] and path.stat().st_mode & 0o777 == 0o600
    assert durable.read_json(str(path)) == {"user": "password"} and not stale.exists()
