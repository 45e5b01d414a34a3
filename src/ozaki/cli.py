"""Argument types and checks shared by the command-line tools (ozaki.bench, ozaki.study).

Every error names the option and the value received.
"""

import argparse
import importlib.util
import math
import os
import platform
import stat

import torch

from . import _ops, accuracy
from .crt import MAX_MODULI
from .slicing import MAX_SLICES

DTYPES = {"float64": torch.float64, "float32": torch.float32}
#: ozaki's FP16 slice products are exact only for k <= 2^22 (ozaki.slicing.digit_bits_for).
MAX_FP16_INNER = 1 << 22
DTYPE_NAMES = {torch.float64: "float64", torch.float32: "float32", torch.float16: "float16",
               torch.int8: "int8"}


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Appends an option's default to its help, except where it is None (the help then says what
    happens without the option)."""

    def _get_help_string(self, action):
        if action.default is None:
            return action.help
        return super()._get_help_string(action)


def int_at_least(minimum, description):
    """argparse type: an integer >= minimum, with a message naming the value received."""
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < minimum:
            raise argparse.ArgumentTypeError(f"must be {description}, got {text!r}")
        return value
    return parse


positive_int = int_at_least(1, "a positive integer")
nonnegative_int = int_at_least(0, "an integer >= 0")


def count_in(maximum, what):
    """argparse type: an integer count in 1..maximum, with a message naming `what` and the value
    received ("slice counts must be integers in 1..40, got '41'")."""
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or not 1 <= value <= maximum:
            raise argparse.ArgumentTypeError(f"{what} must be integers in 1..{maximum}, "
                                             f"got {text!r}")
        return value
    return parse


slice_count = count_in(MAX_SLICES, "slice counts")
#: A scheme-II moduli count (backend="crt").
moduli_count = count_in(MAX_MODULI, "moduli counts")


def phi_value(text):
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text!r}")
    return value


#: The seeds torch.Generator.manual_seed takes as distinct: it also takes -2^63..-1, as 2^64 + seed.
SEED_LIMIT = 2 ** 64


def seed_value(text):
    """argparse type: a generator seed, an integer in 0..2^64 - 1."""
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or not 0 <= value < SEED_LIMIT:
        raise argparse.ArgumentTypeError(f"must be an integer in 0..2^64 - 1 (a seed of "
                                         f"torch.Generator.manual_seed), got {text!r}")
    return value


#: The largest |randn| torch's CPU generator draws: the Box-Muller radius sqrt(-2 ln u), u >= 2^-53.
MAX_RANDN = math.sqrt(-2 * math.log(2.0 ** -53))


def check_phi(parser, phis, shapes, seed, dtypes, option="--phi"):
    """A parser error unless a tool's phi_matrix inputs fit the narrowest of `dtypes`: for each phi
    of `phis` and (m, k, n) of `shapes`, A (m x k) then B (k x n) from a CPU generator seeded with
    `seed`, as the tools draw them. Entries |rand - 0.5| exp(phi randn) stay below
    exp(phi MAX_RANDN), so only a phi past that bound has its inputs drawn here."""
    dtype = min(dtypes, key=lambda d: torch.finfo(d).max)
    largest = torch.finfo(dtype).max
    bound = math.log(largest) / MAX_RANDN
    for phi in dict.fromkeys(phis):
        if phi <= bound:
            continue
        for m, k, n in dict.fromkeys(shapes):
            generator = torch.Generator().manual_seed(seed)
            try:
                for rows, cols in ((m, k), (k, n)):
                    accuracy.phi_matrix(rows, cols, phi, generator, dtype)
            except ValueError:
                parser.error(f"argument {option}: {phi:g} is too large: the {m} x {k} x {n} inputs "
                             f"(rand - 0.5) * exp(phi * randn) of --seed {seed} hold entries past "
                             f"the range of {DTYPE_NAMES[dtype]} ({largest:.3g}); phi <= "
                             f"{math.floor(bound * 100) / 100:g} fits every seed")


def resolve_device(parser, text, option="--device"):
    """`text` (cpu, cuda, cuda:I; None: cuda if usable, else cpu) as a torch.device with its index,
    or a parser error saying why it cannot be used."""
    if text is None:
        text = "cuda" if torch.cuda.is_available() and _ops.cuda_backend_built() else "cpu"
    try:
        device = torch.device(text)
    except RuntimeError:
        device = None
    if device is None or device.type not in ("cpu", "cuda"):
        parser.error(f"argument {option}: expected cpu, cuda or cuda:I, got {text!r}")
    if device.type == "cpu":
        return device
    if not torch.cuda.is_available():
        parser.error(f"argument {option}: {text!r} requested but torch.cuda.is_available() "
                     "is False")
    if device.index is not None and device.index >= torch.cuda.device_count():
        parser.error(f"argument {option}: {text!r} but only {torch.cuda.device_count()} "
                     "CUDA device(s) are visible")
    if not _ops.cuda_backend_built():
        parser.error(f"argument {option}: {text!r} but this ozaki build has no CUDA backend "
                     "(rebuild with OZAKI_FORCE_CUDA=1, or pass --device cpu)")
    return device if device.index is not None else torch.device("cuda", torch.cuda.current_device())


def inner_dimension(text):
    """argparse type: an inner dimension k the FP16 plans take (exact FP16 slice products:
    k <= 2^22)."""
    value = positive_int(text)
    if value > MAX_FP16_INNER:
        raise argparse.ArgumentTypeError(f"k must be at most 2^22 = {MAX_FP16_INNER} (the limit of "
                                         f"exact FP16 slice products), got {text!r}")
    return value


def check_operand_memory(parser, option, shapes, devices):
    """A parser error where the float64 A (m x k), B (k x n) and C = A @ B of a product of
    `shapes` alone would not fit the host's memory (the tools draw the operands there) or a CUDA
    device's of `devices`: such a size is named now rather than ending in the allocator's
    traceback."""
    places = [("the host", os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))]
    places += [(str(device), torch.cuda.get_device_properties(device).total_memory)
               for device in dict.fromkeys(devices) if device.type == "cuda"]
    for m, k, n in dict.fromkeys(shapes):
        needed = 8 * (m * k + k * n + m * n)
        shape = f"{n} x {n}" if m == k == n else f"{m} x {k} x {n}"
        for place, total in places:
            if needed > total:
                parser.error(f"argument {option}: {shape} float64 A, B and C = A @ B need "
                             f"{needed / 2**30:.3g} GiB, more than {place}'s "
                             f"{total / 2**30:.3g} GiB")


def check_output_path(parser, option, path):
    """A parser error unless `path` can be written as a file: its folder exists, the path is no
    folder, and the file opens for writing (tried here, before any work, so that a read-only
    folder or file fails now rather than after the run; a file this creates is removed)."""
    if path is None:
        return
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        problem = "is not a folder" if os.path.exists(folder) else "does not exist"
        parser.error(f"argument {option}: folder {folder!r} of {path!r} {problem}")
    if os.path.isdir(path):
        parser.error(f"argument {option}: {path!r} is a folder, expected a file path")
    existed = os.path.lexists(path)
    try:  # append and non-blocking: an existing file keeps its contents, a FIFO does not hang
        descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK)
    except OSError as error:
        parser.error(f"argument {option}: {path!r} cannot be written ({error.strerror})")
    os.close(descriptor)
    if not existed:
        os.remove(path)


def device_name(device):
    """Human-readable name of a torch.device: the GPU's name, or the CPU and its thread count."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU {platform.processor() or platform.machine()}, {torch.get_num_threads()} threads"


PLOT_SUFFIXES = (".png", ".pdf", ".svg")


def check_plot_path(parser, option, path):
    """A parser error unless `path` can take a figure: a writable file ending in .png, .pdf or
    .svg, and matplotlib (optional for ozaki) importable."""
    if path is None:
        return
    check_output_path(parser, option, path)
    if os.path.splitext(path)[1].lower() not in PLOT_SUFFIXES:
        parser.error(f"argument {option}: expected a file ending in {', '.join(PLOT_SUFFIXES)}, "
                     f"got {path!r}")
    if importlib.util.find_spec("matplotlib") is None:
        parser.error(f"argument {option}: figures need matplotlib (pip install matplotlib)")


def check_distinct_outputs(parser, outputs):
    """A parser error where two output options would write one file (the later one would
    replace what the earlier wrote), named by its path or, where it exists, as a file (hard links
    too); devices and pipes (/dev/stdout) take both. outputs: (option, what it writes, its path
    as given or None where the option is not given, the files it writes) in the order they are
    written."""
    written = {}
    for option, what, given, paths in outputs:
        if given is None:
            continue
        for path in paths:
            key = _file_key(path)
            if key is None:
                continue
            earlier, earlier_path = written.setdefault(key, (option, path))
            if earlier != option:
                parser.error(f"argument {option}: {given!r} would write {what} over the "
                             f"{earlier} file {earlier_path!r}; give them different paths")


def _file_key(path):
    """What tells files apart: (device, inode) of an existing regular file, the resolved path of
    one to be made, None for a device or pipe (writes to it replace nothing)."""
    try:
        status = os.stat(path)
    except OSError:
        return ("made", os.path.realpath(path))
    if not stat.S_ISREG(status.st_mode):
        return None
    return ("file", status.st_dev, status.st_ino)


def per_dtype_paths(path, dtypes):
    """{dtype name: file}: `path` itself for one dtype, 'name-float64.png' etc. for several."""
    if len(dtypes) == 1:
        return {dtypes[0]: path}
    stem, suffix = os.path.splitext(path)
    return {name: f"{stem}-{name}{suffix}" for name in dtypes}

