"""ring.py - the node's RAM ring of wire records, from the sampler to the link, in front of the
flash spill (spill.py).

Contract
- One producer (the sampler calls append) and one consumer (the link calls peek, sent_to,
  rewind and release), in one thread.
- Capacity is fixed in records at construction; the buffer is allocated there, once.
  No method allocates, but those of the spill behind the ring when it writes or reads the
  flash (spill.py: never while the collector acknowledges in time).
- Records are addressed by sequence number: seq counts every record held since boot, and
  record `seq` lives at byte (seq % capacity) * RECORD_SIZE of `buf` while it is in RAM.
      first <= low <= next,  first <= sent <= next
  `first` is the oldest record still held (the collector has not said it is on disk),
  `low` the oldest still in RAM (records [first, low) are only on the flash behind the ring),
  `sent` the next record to send, `next` the seq the next append gets. `base` is the seq of
  the first record sampled this boot: those below were kept from before a reset (spill.py).
- Held records are one run [first, next): without a spill, all of it in RAM (low = first);
  with one (`behind`), the oldest on flash, the newest in RAM, the two overlapping.
- Full RAM: append moves the oldest record out of RAM. If the spill holds it, nothing is lost;
  else it is dropped, with everything older (the run stays one run), counted in `dropped`, and
  append returns True so the caller can say so. Nothing else is ever lost (but what lose()
  is told: a full or damaged spill).
- A batch is a run of records that is contiguous in one buffer: peek(max_n) says how many
  records, starting at `sent`, can go in one batch (0: none can go now), and where they
  are: `src` (buf, or the spill's read buffer for records only on flash), `src_off`, and
  `src_interval_s` (0: the node's interval; else that of the flash segment they come from).
  The link sends src[src_off : src_off + n * RECORD_SIZE] as it is, copying nothing.
- sent_to(upto) moves `sent` on once the broker has a batch; rewind(seq) moves it back (after a
  reconnect, or when the collector asks again) but never below `first`.
- release(upto) frees every record with seq < upto (the collector's ack), in RAM and on flash;
  releasing what is already free is a no-op.
"""

from wattnode import wire


class Ring:
    def __init__(self, capacity):
        if capacity < 2:
            raise ValueError("ring capacity must be at least 2 records")
        self.capacity = capacity
        self.buf = bytearray(capacity * wire.RECORD_SIZE)
        self.first = 0
        self.low = 0
        self.sent = 0
        self.next = 0
        self.base = 0
        self.dropped = 0
        self.behind = None  # the spill (spill.py) behind the ring, or None
        self.src = self.buf
        self.src_off = 0
        self.src_interval_s = 0

    def count(self):
        """Records held: not yet on the collector's disk."""
        return self.next - self.first

    def in_ram(self):
        return self.next - self.low

    def unsent(self):
        return self.next - self.sent

    def append(self, t_s, power_dw, energy_wh, voltage_cv, current_ma):
        lost = False
        if self.next - self.low >= self.capacity:
            lost = self._make_room()
        wire.pack_record(self.buf, (self.next % self.capacity) * wire.RECORD_SIZE,
                         t_s, power_dw, energy_wh, voltage_cv, current_ma)
        self.next += 1
        if self.behind is not None:
            self.behind.appended(self)
        return lost

    def _make_room(self):
        """The oldest record in RAM leaves it: True if it is lost (not held behind)."""
        seq = self.low
        behind = self.behind
        if behind is not None and behind.holds(seq):
            self.low = seq + 1
            return False
        if behind is not None:
            behind.release(seq + 1)  # older ones on flash go too: the run stays one run
        self.lose(seq + 1)
        return True

    def lose(self, upto):
        """Records below upto are gone unacknowledged: counted in `dropped`."""
        if upto > self.first:
            self.dropped += upto - self.first
            self.first = upto
            if self.low < upto:
                self.low = upto
            if self.sent < upto:
                self.sent = upto

    def put(self, buf, off):
        """A record kept from before a reset (spill.py, at boot): appended as it is."""
        dst = (self.next % self.capacity) * wire.RECORD_SIZE
        self.buf[dst:dst + wire.RECORD_SIZE] = buf[off:off + wire.RECORD_SIZE]
        self.next += 1

    def offset(self, seq):
        return (seq % self.capacity) * wire.RECORD_SIZE

    def peek(self, max_n):
        while self.sent < self.low:  # only on flash: the spill reads it in
            n = self.behind.load(self, self.sent, max_n)
            if n > 0:
                self.src = self.behind.buf
                self.src_off = self.behind.off
                self.src_interval_s = self.behind.interval_s
                return n
            if n < 0:
                return 0  # not now (no heap for the read buffer): the link tries again
            # 0: the segment was damaged and dropped (lose()): `sent` has moved on
        n = self.next - self.sent
        to_end = self.capacity - self.sent % self.capacity
        if n > to_end:
            n = to_end
        self.src = self.buf
        self.src_off = (self.sent % self.capacity) * wire.RECORD_SIZE
        self.src_interval_s = 0
        return n if n < max_n else max_n

    def sent_to(self, upto):
        if upto > self.next:
            upto = self.next
        if upto > self.sent:
            self.sent = upto

    def rewind(self, seq):
        if seq < self.first:
            seq = self.first
        if seq < self.sent:
            self.sent = seq

    def release(self, upto):
        if upto > self.next:
            upto = self.next
        if upto > self.first:
            self.first = upto
            if self.low < upto:
                self.low = upto
            if self.sent < upto:
                self.sent = upto
            if self.behind is not None:
                self.behind.release(upto)
