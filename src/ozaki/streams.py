"""The current CUDA stream, found cheaply: small products are paced by the host, and
torch.cuda.current_stream (a device lookup and a new Stream object per call, as Event.record
without a stream also makes) cost several microseconds each time a call records an event."""

import threading

import torch

#: Stream objects remembered, by (device index, raw stream handle); cleared when it grows past this.
MAX_STREAMS = 64

_streams = {}
_lock = threading.Lock()


def current_stream(index):
    """torch.cuda.current_stream(index) for CUDA device `index` (an int): the same stream, as one
    object per raw handle, looked up by the handle alone."""
    key = (index, torch._C._cuda_getCurrentRawStream(index))
    stream = _streams.get(key)
    if stream is None:
        stream = torch.cuda.current_stream(index)
        with _lock:
            if len(_streams) >= MAX_STREAMS:
                _streams.clear()
            _streams[key] = stream
    return stream
