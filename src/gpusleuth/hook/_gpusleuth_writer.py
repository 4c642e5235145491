"""One process's events file: buffered lines, one write per flush, nothing lost to a full disk.

The recorder (``_gpusleuth_state``) owns one ``Writer`` per process (a forked child gets a new one, with its
own file and header). Lines are appended to ``buf`` on the hot path — step records as tuples, formatted
only here, in a batch (``_step_line``), everything else as ready-made text — and written to
``$GPUSLEUTH_RUN_DIR/raw/events-<pid>.tsv`` with one ``os.write`` per flush. Standard library only, Python
3.8+, never raises into the job.
"""
import os
import threading

from _gpusleuth_records import _now, _step_line

FLUSH_NS = 500000000  # flush at a step boundary at most this long after the previous flush
UNWRITTEN_MAX = 64 << 20  # step events held in memory while the run's disk refuses them (~600k steps)


def _say(text):
    """One line on the job's stderr, never an exception (the job's own output must not break us)."""
    try:
        os.write(2, (text + "\n").encode("utf-8", "replace"))
    except BaseException:
        pass


class Writer:
    """The buffer and the file of one process. ``header()`` gives the ``H`` line, asked for at the first
    write (by then the process knows its role and whether torch is loaded)."""

    __slots__ = ("run_dir", "pid", "header", "fd", "broken", "buf", "lock", "last_flush", "header_done",
                 "unwritten")

    def __init__(self, run_dir, pid, header, t_ns):
        self.run_dir = run_dir
        self.pid = pid
        self.header = header
        self.fd = None
        self.broken = False
        self.buf = []
        self.lock = threading.RLock()  # flushes from several threads (a server's request threads)
        self.last_flush = t_ns
        self.header_done = False
        self.unwritten = b""  # bytes a write refused (disk full): retried at every flush, spilled at exit

    def close(self):
        """A forked child: the parent's file is not this process's."""
        if self.fd is not None:
            try:
                os.close(self.fd)
            except OSError:
                pass
            self.fd = None

    def flush(self, force=False):
        """Append the buffered lines with one write; the file (and its header) appear at the first one.
        Other threads may append while we write (a server's requests): the lines taken are cut off the
        front of the buffer, never the buffer swapped, and one flush writes at a time. True when it wrote
        (or tried to): there was something to write."""
        with self.lock:
            return self._flush(force)

    def _flush(self, force):
        """A write the disk refuses (full, quota) loses nothing: the bytes not written stay in
        ``unwritten`` (up to UNWRITTEN_MAX) and go first at the next flush, so the file continues exactly
        where it stopped; at exit what still could not be written is spilled (``spill``)."""
        if self.broken:
            self.buf = []
            return False
        if not self.buf and not self.unwritten and not (force and not self.header_done):
            return False
        n = len(self.buf)
        buf = self.buf[:n]
        del self.buf[:n]
        data = self.unwritten
        self.unwritten = b""
        try:
            if not self.header_done:
                buf.insert(0, self.header())
                self.header_done = True
            data += "".join([x if x.__class__ is str else _step_line(x) for x in buf]).encode("utf-8", "replace")
            if self.fd is None:
                raw = os.path.join(self.run_dir, "raw")
                os.makedirs(raw, exist_ok=True)
                flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)
                self.fd = os.open(os.path.join(raw, "events-%d.tsv" % self.pid), flags, 0o644)
            while data:
                n = os.write(self.fd, data)
                data = data[n:]
        except OSError:
            if len(data) > UNWRITTEN_MAX:
                self.broken = True  # a disk that stays full for this long: stop holding the job's memory
                _say("gpusleuth: the run's disk refused %d bytes of step events; recording of steps stopped"
                     % len(data))
            else:
                self.unwritten = data
        except BaseException:
            self.broken = True  # nowhere to write: stop trying rather than slow the job down
        self.last_flush = _now()
        return True

    def spill(self):
        """At exit, events the run's disk never took go to ``$GPUSLEUTH_SPILL_DIR`` (another filesystem,
        chosen by the launcher), which appends them to this process's events file once it has space."""
        data, self.unwritten = self.unwritten, b""
        spill = os.environ.get("GPUSLEUTH_SPILL_DIR")
        if not data:
            return
        try:
            if not spill:
                raise OSError("no spill directory")
            fd = os.open(os.path.join(spill, "events-%d.tsv" % self.pid), os.O_WRONLY | os.O_CREAT | os.O_APPEND,
                         0o600)
            try:
                while data:
                    data = data[os.write(fd, data):]
            finally:
                os.close(fd)
        except OSError:
            _say("gpusleuth: %d step event line(s) of process %d could not be written (the run's disk is full)"
                 % (data.count(b"\n"), self.pid))
