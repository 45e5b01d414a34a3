"""The torch.distributed collectives ozaki's sharded products use, on one process group.

Every rank must run the same collectives in the same order, so all decisions made around them
(plans, chunking, errors) come from values every rank holds alike: reduced values or the shapes
the ranks agreed on (check_agree).
"""

import contextlib
import itertools
import zlib

import torch
import torch.distributed as dist


class RankGroup:
    """A process group (None: the default group) and the collectives on it."""

    def __init__(self, group=None):
        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError("ozaki.distributed: torch.distributed is not initialized (call "
                               "torch.distributed.init_process_group first)")
        if group is dist.GroupMember.NON_GROUP_MEMBER:  # what new_group gives a non-member
            raise ValueError(f"ozaki.distributed: this process (global rank {dist.get_rank()}) "
                             "is not a member of the group passed; call with a group it belongs "
                             "to, on its members only")
        if group is not None and not isinstance(group, dist.ProcessGroup):
            raise TypeError(f"ozaki.distributed: group must be None (the default group) or a "
                            f"torch.distributed.ProcessGroup, got {type(group).__name__} "
                            f"{group!r}")
        self.group = group
        self.size = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        if self.rank < 0:  # torch's answer on a rank outside the group
            raise ValueError(f"ozaki.distributed: this process (global rank {dist.get_rank()}) "
                             "is not a member of the group passed; call with a group it belongs "
                             "to, on its members only")
        # where the collectives of checks run before any operand is known to be a tensor: the
        # CPU under gloo, else the GPU the group is bound to (init_process_group's device_id),
        # else the current one (torch.cuda.set_device)
        backend = str(dist.get_backend(group))
        self.device = torch.device("cpu")
        if "nccl" in backend and "gloo" not in backend:
            bound = getattr(group or dist.distributed_c10d._get_default_group(),
                            "bound_device_id", None)
            self.device = bound or torch.device("cuda", torch.cuda.current_device())

    def _reduced(self, tensor, op):
        out = tensor.clone()
        if self.size > 1:
            dist.all_reduce(out, op=op, group=self.group)
        return out

    def max(self, tensor):
        """Element-wise maximum over the ranks (a new tensor)."""
        return self._reduced(tensor, dist.ReduceOp.MAX)

    def sum(self, tensor):
        """Element-wise sum over the ranks (a new tensor). Exact only for integers or values on a
        common grid that the sum cannot leave: the callers pass only such."""
        return self._reduced(tensor, dist.ReduceOp.SUM)

    def sum_started(self, tensor):
        """Start summing `tensor` over the ranks in place; returns a handle whose wait() makes the
        sum ready for the current stream (so the caller can compute meanwhile)."""
        if self.size == 1:
            return _Done()
        return dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=self.group, async_op=True)

    def gather_columns(self, x):
        """The ranks' (rows, k_r) tensors side by side, in rank order: (rows, sum of k_r)."""
        if self.size == 1:
            return x
        widths = self.agreed_sizes(x.shape[1], x.device)
        padded = torch.zeros((x.shape[0], max(widths)), dtype=x.dtype, device=x.device)
        padded[:, :x.shape[1]] = x
        parts = [torch.empty_like(padded) for _ in range(self.size)]
        dist.all_gather(parts, padded, group=self.group)
        return torch.cat([part[:, :width] for part, width in zip(parts, widths)], dim=1)

    def check_agree(self, name, device, **values):
        """Raise the same ValueError on every rank unless every rank passed the same values:
        integers (shapes) compared as they are, others (dtype, layout, options) by option_code.
        All agree: one all-reduce. A mismatch: the ranks also gather the values to name them."""
        if self.size == 1:
            return
        codes = [2 * v if type(v) is int else 2 * option_code(v) + 1 for v in values.values()]
        local = torch.tensor([[c, -c] for c in codes], dtype=torch.int64, device=device)
        reduced = self.max(local).tolist()
        for (what, value), (high, negated_low) in zip(values.items(), reduced):
            if high != -negated_low:  # the same on every rank: all gather, none waits
                spread = _spread(self.gather_texts(repr(value), device))
                raise ValueError(f"{name}: {what} differs across the ranks of the group "
                                 f"({spread}); every rank must pass the same")

    @contextlib.contextmanager
    def checks_together(self, name, *operands):
        """Run a rank's own checks of its inputs (the body) so that an error on any rank raises on
        every rank, before any other collective: the rank that raised re-raises its error, the
        others an error of the same type that names the rank and its message. One all-reduce of
        a flag when no rank raised, on the device of the first of `operands` that is a tensor of
        the group's device type (a rank's own GPU under NCCL), else on the group's device."""
        device = next((x.device for x in operands
                       if isinstance(x, torch.Tensor) and x.device.type == self.device.type),
                      self.device)
        try:
            yield
        except Exception as error:
            self._raise_peer_errors(name, _error_text(error), device)
            raise
        self._raise_peer_errors(name, None, device)

    def _raise_peer_errors(self, name, text, device):
        """text: this rank's error as 'Type: message', or None where it raised none."""
        if self.size == 1:
            return
        raised = self.agreed_sizes(int(text is not None), device)
        if not any(raised):
            return
        texts = self.gather_texts(text or "", device)
        if text is not None:
            return  # the caller re-raises this rank's own error
        first = raised.index(1)
        kind = texts[first].split(":", 1)[0]
        reported = "; ".join(f"rank {rank} raised {message}"
                             for rank, message in enumerate(texts) if raised[rank])
        raise _PEER_ERRORS.get(kind, RuntimeError)(
            f"{name}: not run on any rank, as {reported}")

    def gather_texts(self, text, device):
        """Every rank's string, in rank order."""
        data = torch.tensor([list(text.encode(errors="backslashreplace"))], dtype=torch.int64,
                            device=device)
        widths = self.agreed_sizes(data.shape[1], device)
        joined = bytes(self.gather_columns(data)[0].tolist())
        starts = itertools.accumulate(widths, initial=0)
        return [joined[start:start + width].decode(errors="replace")
                for start, width in zip(starts, widths)]

    def agreed_sizes(self, size, device):
        """Every rank's `size` (an int), in rank order."""
        return self.max(_one_hot(self.rank, self.size, size, device)).tolist()


def _error_text(error):
    """'Type: message' of an error, made before any collective (a message that cannot be made is
    left out: the ranks must reach the collectives alike)."""
    try:
        return f"{type(error).__name__}: {error}"
    except Exception:  # noqa: BLE001  (a __str__ that raises)
        return f"{type(error).__name__}: (its message could not be read)"


#: The types an error raised by another rank's checks is raised as here (others: RuntimeError).
_PEER_ERRORS = {error.__name__: error for error in (TypeError, ValueError, NotImplementedError)}


class _Done:
    def wait(self):
        return True


def _one_hot(index, length, value, device):
    out = torch.zeros(length, dtype=torch.int64, device=device)
    out[index] = value
    return out


def _spread(texts):
    """The ranks' values (reprs, in rank order): 'from 5 to 6' for integers, else each value and
    its ranks, 'torch.float64 on ranks 0, 2; torch.float32 on rank 1'."""
    if all(text.lstrip("-").isdigit() for text in texts):
        return f"from {min(map(int, texts))} to {max(map(int, texts))}"
    ranks = {}
    for rank, text in enumerate(texts):
        ranks.setdefault(text, []).append(str(rank))
    return "; ".join(f"{text} on rank{'s' if len(on) > 1 else ''} {', '.join(on)}"
                     for text, on in ranks.items())


def option_code(*values) -> int:
    """A 31-bit code of options that must be the same on every rank."""
    return zlib.crc32(repr(values).encode()) & 0x7FFFFFFF
