"""Exit without ``terminate called without an active exception`` (SIGABRT, exit -6).

fairseq fills batches in a background thread (``BufferedIterator`` / ``BackgroundConsumer``,
``--data-buffer-size``, a daemon thread).  A loop that stops before its iterator is
exhausted leaves that thread running: training stopped by ``--max-update`` inside an
epoch, validation cut by ``--max-valid-steps``.  The thread keeps collating the next
batches (torch ops that release the GIL) until the buffer is full.  When the process
ends while it is inside such an op, Python finalization ends the daemon thread from inside
a C++ frame and the C++ runtime aborts: the run trained and saved everything, and then
exits with SIGABRT.  A job script, a SLURM array or a test reads that as a failed run.
Seen here in 1 of 8 runs of a 30-update training under load (tests/integration/test_resume.py).

The fix: every background consumer reads its source through a stop check, and at exit
(``atexit``, after the main thread has finished and before daemon threads are ended) the
check is set, each live consumer's buffer is emptied so that a blocked ``put`` returns,
and the thread is joined (it finishes the batch it is building, then stops).  Nothing
changes while the process runs.
"""

import atexit
import queue
import threading
import time
import weakref

BEHAVIOUR_CHANGE = False

JOIN_TIMEOUT_S = 30.0

_STOP = threading.Event()
_CONSUMERS = weakref.WeakSet()


def _stoppable(source):
    for item in source:
        if _STOP.is_set():
            return
        yield item


def stop_background_consumers(timeout=JOIN_TIMEOUT_S):
    """Stop and join every live fairseq background consumer thread; returns how many were
    still running.  Called at exit; safe to call more than once."""
    _STOP.set()
    live = [c for c in list(_CONSUMERS) if c.is_alive()]
    deadline = time.monotonic() + timeout
    for consumer in live:
        while consumer.is_alive() and time.monotonic() < deadline:
            _drain(consumer._queue)
            consumer.join(0.05)
        _drain(consumer._queue)
    return len(live)


def _drain(q):
    try:
        while True:
            q.get_nowait()
    except queue.Empty:
        pass


def install():
    from fairseq.data import iterators

    cls = iterators.BackgroundConsumer
    if getattr(cls.__init__, "_fsa_clean_exit", False):
        return
    original_init = cls.__init__

    def __init__(self, queue, source, *args, **kwargs):
        original_init(self, queue, _stoppable(source), *args, **kwargs)
        _CONSUMERS.add(self)

    __init__._fsa_clean_exit = True
    cls.__init__ = __init__
    atexit.register(stop_background_consumers)
