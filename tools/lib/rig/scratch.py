"""scratch.py - a bench's or a tool's working folder: removed when the work ends well, kept
(and said where) when it fails, for a look at the logs and files it holds."""

import contextlib
import shutil
import tempfile


@contextlib.contextmanager
def scratch(prefix):
    work = tempfile.mkdtemp(prefix=prefix)
    try:
        yield work
    except BaseException:
        print("kept %s for a look" % work)
        raise
    shutil.rmtree(work, ignore_errors=True)
