"""Small device values read by the host without waiting for the work queued after them: the
plan's estimate (ozaki/product.py) and the fixed-count check (ozaki/fixed_counts.py)."""

import torch

from .streams import current_stream


class HostCopy:
    """Device values on their way to the host: copied without a wait where the device is a GPU
    (into pinned memory, on the current stream), read by values() (which waits for that copy
    alone, not for work queued after it)."""

    def __init__(self, values, host=None, copied=None, stream=None):
        """host: a pinned tensor of values' shape and dtype to copy into, and copied: an event to
        record (reused by repeated reads: ozaki/replay.py); fresh ones when None. stream: the
        current stream of values' device, where the caller has it."""
        if values.is_cuda:
            if host is None:
                host = torch.empty(values.shape, dtype=values.dtype, pin_memory=True)
            self._host = host
            self._host.copy_(values, non_blocking=True)
            self._copied = torch.cuda.Event() if copied is None else copied
            self._copied.record(current_stream(values.get_device()) if stream is None else stream)
        else:
            self._host, self._copied = values, None

    @classmethod
    def queued(cls, host, copied):
        """Values whose copy into pinned tensor `host` earlier work queued (a replayed graph's
        copy node), with event `copied` recorded after that work."""
        read = cls.__new__(cls)
        read._host, read._copied = host, copied
        return read

    def values(self):
        """The values as a Python number (0-d) or list."""
        if self._copied is not None:
            self._copied.synchronize()
        return self._host.tolist()
