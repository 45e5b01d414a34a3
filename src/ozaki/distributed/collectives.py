"""The torch.distributed collectives ozaki's sharded products use, on one process group.

Every rank must run the same collectives in the same order, so all decisions made around them
(plans, chunking, errors) come from values every rank holds alike: reduced values or the shapes
the ranks agreed on (check_agree).
"""

import zlib

import torch
import torch.distributed as dist


class RankGroup:
    """A process group (None: the default group) and the collectives on it."""

    def __init__(self, group=None):
        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError("ozaki.distributed: torch.distributed is not initialized (call "
                               "torch.distributed.init_process_group first)")
        self.group = group
        self.size = dist.get_world_size(group)
        self.rank = dist.get_rank(group)

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
        """Raise the same ValueError on every rank unless every rank passed the same integers
        (shapes, dtype and options hashed by option_code)."""
        if self.size == 1:
            return
        local = torch.tensor([[v, -v] for v in values.values()], dtype=torch.int64, device=device)
        reduced = self.max(local).tolist()
        for (what, _), (high, negated_low) in zip(values.items(), reduced):
            if high != -negated_low:
                raise ValueError(f"{name}: {what} differs across the ranks of the group (from "
                                 f"{-negated_low} to {high}); every rank must pass the same")

    def agreed_sizes(self, size, device):
        """Every rank's `size` (an int), in rank order."""
        return self.max(_one_hot(self.rank, self.size, size, device)).tolist()


class _Done:
    def wait(self):
        return True


def _one_hot(index, length, value, device):
    out = torch.zeros(length, dtype=torch.int64, device=device)
    out[index] = value
    return out


def option_code(*values) -> int:
    """A 31-bit code of options that must be the same on every rank."""
    return zlib.crc32(repr(values).encode()) & 0x7FFFFFFF
