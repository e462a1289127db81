"""files.py - the storage interface on PHPFina files, write side: the collector's Store, a
Reader (reader.py) of its data directory that sees what is pending too, with the write path
of writer.py over commit.py's Committer (the files' commit protocol and start-up recovery).

    store = Store(data_dir, complaints)   # the directory locked and checked, nothing changed
    store.recover(retained_acks); store.take(topic, payload); done = store.commit()
"""

from wattlog.store.commit import Committer
from wattlog.store.ingest import MAX_AGE_S
from wattlog.store.reader import Reader
from wattlog.store.writer import Writer


class Store(Writer, Reader):
    def __init__(self, data_dir, complaints, max_future_s=3600, max_age_s=MAX_AGE_S):
        # locks and checks the data directory, changes nothing yet (commit.py)
        self.committer = Committer(data_dir, complaints, recover=False)
        Reader.__init__(self, data_dir, None, self.committer.summaries,
                        lambda fid: self.committer.stale.get(fid))
        Writer.__init__(self, complaints, max_future_s, max_age_s)

    def registry(self):
        return self.committer.registry  # the live one: a commit may add a feed

    def stored_status(self):
        return Reader.status(self)
