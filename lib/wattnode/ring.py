"""ring.py - the node's RAM ring of wire records, from the sampler to the link.

Contract
- One producer (the sampler calls append) and one consumer (the link calls peek, offset,
  sent_to, rewind and release), in one thread.
- Capacity is fixed in records at construction; the buffer is allocated there, once.
  No method allocates.
- Records are addressed by sequence number: seq counts every record appended since boot, and
  record `seq` lives at byte (seq % capacity) * RECORD_SIZE of `buf`.
      first <= sent <= next
  `first` is the oldest record still held (the collector has not said it is on disk),
  `sent` the next record to send, `next` the seq the next append gets.
- Full: append overwrites the oldest record, counts it in `dropped` and returns True, so the
  caller can say so. Nothing else is ever lost.
- A batch is a run of records that is contiguous in `buf`: peek(max_n) says how many records,
  starting at `sent`, can go in one batch (it stops at the end of the buffer), and the link
  sends buf[offset(sent) : offset(sent) + n * RECORD_SIZE] as they are, copying nothing.
- sent_to(upto) moves `sent` on once the broker has a batch; rewind(seq) moves it back (after a
  reconnect, or when the collector asks again) but never below `first`.
- release(upto) frees every record with seq < upto (the collector's ack); releasing what is
  already free is a no-op.
"""

from wattnode import wire


class Ring:
    def __init__(self, capacity):
        if capacity < 2:
            raise ValueError("ring capacity must be at least 2 records")
        self.capacity = capacity
        self.buf = bytearray(capacity * wire.RECORD_SIZE)
        self.first = 0
        self.sent = 0
        self.next = 0
        self.dropped = 0

    def count(self):
        """Records held: not yet on the collector's disk."""
        return self.next - self.first

    def unsent(self):
        return self.next - self.sent

    def append(self, t_s, power_dw, energy_wh, voltage_cv, current_ma):
        full = self.next - self.first >= self.capacity
        if full:
            self.first += 1
            self.dropped += 1
            if self.sent < self.first:
                self.sent = self.first
        wire.pack_record(self.buf, (self.next % self.capacity) * wire.RECORD_SIZE,
                         t_s, power_dw, energy_wh, voltage_cv, current_ma)
        self.next += 1
        return full

    def offset(self, seq):
        return (seq % self.capacity) * wire.RECORD_SIZE

    def peek(self, max_n):
        n = self.next - self.sent
        to_end = self.capacity - self.sent % self.capacity
        if n > to_end:
            n = to_end
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
            if self.sent < upto:
                self.sent = upto
