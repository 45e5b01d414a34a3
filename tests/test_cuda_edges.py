"""CUDA results at the edges of the kernels' layouts, against the CPU backend's bits: operands one
element past a 16-byte boundary and rows of odd byte lengths, outputs and batches of more than
2^31 entries (64-bit indices), the INT8 GEMM on views between 16-byte boundaries and over 2^31
rows, and operands on a GPU other than the current one."""

import pytest
import torch

import ozaki
from helpers import assert_bitwise_equal, crt_paths

pytestmark = pytest.mark.cuda


def gib_free():
    free, _ = torch.cuda.mem_get_info()
    return free / 2 ** 30


@pytest.fixture
def large():
    """For a test of large tensors: skips it without about 60 GiB free, and gives the memory back
    to the device after it (the next one finds it free)."""
    torch.cuda.empty_cache()
    if gib_free() < 60:
        pytest.skip("needs about 60 GiB of free GPU memory")
    yield
    torch.cuda.empty_cache()


@pytest.fixture(scope="module")
def paths():
    if not torch.cuda.is_available() or not ozaki._ops.CUDA_BUILT:
        pytest.skip("needs a CUDA device and the CUDA build")
    return crt_paths()


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("m, k, n", [(17, 3, 3), (5, 1, 129), (129, 17, 1), (33, 16, 3),
                                     (1, 1, 1), (127, 15, 129)])
@pytest.mark.parametrize("path", ["", "reduced", "cublas", "fused"], ids=["rule", "reduced",
                                                                          "cublas", "fused"])
def test_operands_one_element_past_16_bytes(paths, dtype, m, k, n, path, monkeypatch):
    """A and B contiguous but starting one element past a 16-byte boundary, rows of 3 float64
    entries (24 bytes), k = 1, n = 1: the CUDA bits are the CPU's on every backend and scheme-II
    path (the vector loads take their unaligned branch; the TMA-fed kernels read copies)."""
    if path not in paths:
        pytest.skip(f"no {path} path on this build and GPU")
    monkeypatch.setenv("OZAKI_CRT_PATH", path)
    g = torch.Generator().manual_seed(m * 1000 + k * 10 + n)
    W = torch.randn(m + 1, k + 1, generator=g, dtype=dtype)
    X = torch.randn(k + 1, n + 1, generator=g, dtype=dtype)
    A = W.flatten()[1:1 + m * k].view(m, k)
    B = X.flatten()[1:1 + k * n].view(k, n)
    gemm = ozaki.dgemm if dtype == torch.float64 else ozaki.sgemm
    options = [{"backend": "crt"}] if path else [{}, {"backend": "fp16"}, {"backend": "int8"},
                                                 {"rounding": "nearest"}]
    for kwargs in options:
        assert_bitwise_equal(gemm(A.cuda(), B.cuda(), **kwargs), gemm(A, B, **kwargs))


@pytest.mark.parametrize("backend", ["auto", "fp16", "int8"])
def test_more_than_2_31_entries_in_the_result(paths, large, backend):
    """65536 x 32769 > 2^31 entries (17 GB of float64): every output index is 64-bit. Small
    integer entries make the exact product native's, so torch's product is the reference."""
    A = torch.randint(-8, 9, (65536, 16), device="cuda").double()
    B = torch.randint(-8, 9, (16, 32769), device="cuda").double()
    expected = A @ B
    assert torch.equal(ozaki.dgemm(A, B, backend=backend).view(torch.int64),
                       expected.view(torch.int64))


@pytest.mark.parametrize("backend", ["auto", "fp16"])
def test_batches_of_more_than_2_31_entries(paths, large, backend):
    """32769 x 256 x 256 > 2^31 entries in 32769 matrices (more than one grid dimension and one
    strided batched GEMM call hold): batched indices are 64-bit."""
    A = torch.randint(-8, 9, (32769, 256, 8), device="cuda").double()
    B = torch.randint(-8, 9, (32769, 8, 256), device="cuda").double()
    expected = torch.matmul(A, B)
    assert torch.equal(ozaki.gemm(A, B, backend=backend).view(torch.int64),
                       expected.view(torch.int64))


def test_row_passes_over_more_than_2_32_rows(paths, large):
    """(2^32 + 129) x 1 float32 rows (17 GB): the one-block-per-row passes (row_stats for scheme
    I's splits, row_norm_scales for scheme II's scales) cover every row, where a 64-bit row count
    once wrapped in the launch to 129 blocks and left the other rows' values unwritten. The last
    rows' values are those of the same rows passed alone."""
    rows = (1 << 32) + 129
    a = torch.empty(rows, 1, dtype=torch.float32, device="cuda")
    a[:, 0] = torch.arange(rows, dtype=torch.float64, device="cuda").remainder_(1013).sub_(506)
    tail = a[-300:].clone()
    stats = ozaki._ops.row_stats(a)
    alone = ozaki._ops.row_stats(tail)
    for part, expected in zip(stats, alone):
        assert torch.equal(part[-300:], expected)
    del stats
    scales = ozaki._ops.row_norm_scales(a, ozaki._ops.row_stats(a)[0])
    assert torch.equal(scales[-300:], ozaki._ops.row_norm_scales(tail, alone[0]))


@pytest.mark.parametrize("k", [16, 48, 20])
@pytest.mark.parametrize("offset", [1, 3, 8])
def test_int8_matmul_of_views_between_16_byte_boundaries(paths, k, offset):
    """ozaki::int8_matmul on contiguous int8 views that start 1, 3 or 8 bytes past a 16-byte
    boundary, rows of a multiple of 16 bytes too (nothing to pad): the CPU's products."""
    g = torch.Generator().manual_seed(k * 10 + offset)
    whole_a = torch.randint(-128, 128, (37 * k + offset,), generator=g, dtype=torch.int8)
    whole_b = torch.randint(-128, 128, (19 * k + offset,), generator=g, dtype=torch.int8)
    a, bt = whole_a[offset:].view(37, k), whole_b[offset:].view(19, k)
    expected = ozaki._ops.int8_matmul(a, bt)
    a_gpu, bt_gpu = whole_a.cuda()[offset:].view(37, k), whole_b.cuda()[offset:].view(19, k)
    assert a_gpu.data_ptr() % 16 == offset % 16
    assert torch.equal(ozaki._ops.int8_matmul(a_gpu, bt_gpu).cpu(), expected)


def test_int8_matmul_of_more_than_2_31_rows(paths):
    """(2^31 + 37) x 16 int8 rows (32 GiB) times 4 columns: past cuBLAS's int sizes (its 64-bit
    call refuses the INT8 GEMM), so the rows go in blocks; the first and last rows' products are
    those of the same rows alone."""
    torch.cuda.empty_cache()
    if gib_free() < 72:
        pytest.skip("needs about 72 GiB of free GPU memory")
    rows = (1 << 31) + 37
    g = torch.Generator().manual_seed(5)
    a = torch.empty(rows, 16, dtype=torch.int8, device="cuda")
    a[:, 1:] = torch.randint(-128, 128, (15,), generator=g, dtype=torch.int8).cuda()
    step = 1 << 28
    for first in range(0, rows, step):  # column 0 tells the rows apart
        last = min(rows, first + step)
        a[first:last, 0] = torch.arange(first, last, device="cuda").remainder_(251).sub_(125)
    bt = torch.randint(-128, 128, (4, 16), generator=g, dtype=torch.int8).cuda()
    tail = a[-300:].clone()
    head = a[:300].clone()
    out = ozaki._ops.int8_matmul(a, bt)
    del a
    assert out.shape == (rows, 4)
    assert torch.equal(out[-300:], ozaki._ops.int8_matmul(tail, bt))
    assert torch.equal(out[:300], ozaki._ops.int8_matmul(head, bt))
    torch.cuda.empty_cache()


two_gpus = pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                              reason="needs two CUDA devices")


@two_gpus
@pytest.mark.parametrize("kwargs", [{}, {"backend": "crt"}, {"backend": "fp16"},
                                    {"backend": "int8"}, {"rounding": "nearest"}], ids=str)
def test_operands_on_another_gpu_than_the_current_one(paths, kwargs):
    """Operands on cuda:1 while cuda:0 is current: every operator works on its operands' device
    (its path chosen for that device too), with the CPU's bits."""
    g = torch.Generator().manual_seed(5)
    A = torch.randn(300, 200, generator=g, dtype=torch.float64)
    B = torch.randn(200, 100, generator=g, dtype=torch.float64)
    with torch.cuda.device(0):
        got = ozaki.dgemm(A.to("cuda:1"), B.to("cuda:1"), **kwargs)
        torch.cuda.synchronize(1)
    assert got.device == torch.device("cuda:1")
    assert_bitwise_equal(got.cpu(), ozaki.dgemm(A, B, **kwargs))
