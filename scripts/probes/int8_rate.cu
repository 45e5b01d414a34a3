// Measures INT8 (CUDA_R_8I -> CUDA_R_32I) GEMM rates through cublasGemmEx, strided-batched GemmEx
// and every cublasLt heuristic candidate, next to FP16 -> FP32, on random full-range operands.
// Build: nvcc -O2 -arch=sm_90 scripts/probes/int8_rate.cu -lcublas -lcublasLt -o int8_rate
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK_CUDA(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("CUDA %s line %d\n", cudaGetErrorString(e), __LINE__); exit(1);} } while (0)
#define CHECK_BLAS(x) do { int s = (int)(x); if (s != 0) { printf("cuBLAS status %d line %d\n", s, __LINE__); } } while (0)

__global__ void fill_int8(int8_t* p, size_t n, unsigned seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    unsigned h = (unsigned)i * 2654435761u ^ seed; h ^= h >> 15; h *= 2246822519u; h ^= h >> 13;
    p[i] = (int8_t)(h & 0xff);
  }
}
__global__ void fill_half(__half* p, size_t n, unsigned seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    unsigned h = (unsigned)i * 2654435761u ^ seed; h ^= h >> 15; h *= 2246822519u; h ^= h >> 13;
    p[i] = __float2half(((int)(h & 0xff) - 128) / 128.0f);
  }
}

template <typename F>
double median_ms(F f, int reps) {
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  for (int i = 0; i < 2; ++i) f();
  std::vector<float> t;
  for (int r = 0; r < reps; ++r) { cudaEventRecord(a); f(); cudaEventRecord(b); cudaEventSynchronize(b); float ms; cudaEventElapsedTime(&ms, a, b); t.push_back(ms); }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

int main(int argc, char** argv) {
  cublasHandle_t h; CHECK_BLAS(cublasCreate(&h));
  cublasLtHandle_t lt; CHECK_BLAS(cublasLtCreate(&lt));
  size_t ws_bytes = size_t(64) << 20; void* ws; CHECK_CUDA(cudaMalloc(&ws, ws_bytes));
  CHECK_BLAS(cublasSetWorkspace(h, ws, ws_bytes));
  const int sizes[] = {4096, 8192, 16384};
  for (int n : sizes) {
    const int batch = n >= 16384 ? 3 : 8;
    size_t ops = size_t(n) * n;
    int8_t *A, *B; int32_t* C; __half *Ah, *Bh; float* Cf;
    CHECK_CUDA(cudaMalloc(&A, ops * batch)); CHECK_CUDA(cudaMalloc(&B, ops * batch)); CHECK_CUDA(cudaMalloc(&C, ops * 4 * batch));
    fill_int8<<<4096, 256>>>(A, ops * batch, 1); fill_int8<<<4096, 256>>>(B, ops * batch, 2);
    const double flops = 2.0 * n * double(n) * n;
    int one = 1, zero = 0;
    auto gemmex = [&](int cols, int8_t* b, int32_t* c) {
      CHECK_BLAS(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, cols, n, n, &one, b, CUDA_R_8I, n, A, CUDA_R_8I, n, &zero, c, CUDA_R_32I, cols, CUBLAS_COMPUTE_32I, CUBLAS_GEMM_DEFAULT));
    };
    double t = median_ms([&] { gemmex(n, B, C); }, 10);
    printf("n=%d gemmex TN default: %.3f ms %.0f TOPS\n", n, t, flops / t / 1e9);
    t = median_ms([&] { gemmex(n / 2, B, C); gemmex(n / 2, B + size_t(n / 2) * n, C + size_t(n / 2) * n); }, 10);
    printf("n=%d gemmex TN two halves: %.3f ms %.0f TOPS\n", n, t, flops / t / 1e9);
    t = median_ms([&] {
      CHECK_BLAS(cublasGemmStridedBatchedEx(h, CUBLAS_OP_T, CUBLAS_OP_N, n, n, n, &one, B, CUDA_R_8I, n, (long long)ops, A, CUDA_R_8I, n, (long long)ops, &zero, C, CUDA_R_32I, n, (long long)ops, batch, CUBLAS_COMPUTE_32I, CUBLAS_GEMM_DEFAULT));
    }, 5);
    printf("n=%d strided batched x%d: %.3f ms per GEMM %.0f TOPS\n", n, batch, t / batch, flops * batch / t / 1e9);
    // cublasLt candidates, TN, int32 out.
    cublasLtMatmulDesc_t desc; CHECK_BLAS(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32I, CUDA_R_32I));
    cublasOperation_t opT = CUBLAS_OP_T, opN = CUBLAS_OP_N;
    CHECK_BLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opT, sizeof opT));
    CHECK_BLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opN, sizeof opN));
    cublasLtMatrixLayout_t la, lb, lc;
    CHECK_BLAS(cublasLtMatrixLayoutCreate(&la, CUDA_R_8I, n, n, n));
    CHECK_BLAS(cublasLtMatrixLayoutCreate(&lb, CUDA_R_8I, n, n, n));
    CHECK_BLAS(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32I, n, n, n));
    cublasLtMatmulPreference_t pref; CHECK_BLAS(cublasLtMatmulPreferenceCreate(&pref));
    CHECK_BLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof ws_bytes));
    cublasLtMatmulHeuristicResult_t res[16]; int found = 0;
    CHECK_BLAS(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, lc, pref, 16, res, &found));
    for (int i = 0; i < found; ++i) {
      t = median_ms([&] { CHECK_BLAS(cublasLtMatmul(lt, desc, &one, B, la, A, lb, &zero, C, lc, C, lc, &res[i].algo, ws, ws_bytes, 0)); }, 5);
      int algo_id = -1, tile = -1, stages = -1, splitk = -1; size_t sz;
      cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_ID, &algo_id, sizeof algo_id, &sz);
      cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile, &sz);
      cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof stages, &sz);
      cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof splitk, &sz);
      printf("n=%d lt cand %d algo=%d tile=%d stages=%d splitk=%d: %.3f ms %.0f TOPS\n", n, i, algo_id, tile, stages, splitk, t, flops / t / 1e9);
    }
    CHECK_CUDA(cudaFree(C)); CHECK_CUDA(cudaFree(A)); CHECK_CUDA(cudaFree(B));
    CHECK_CUDA(cudaMalloc(&Ah, ops * 2)); CHECK_CUDA(cudaMalloc(&Bh, ops * 2)); CHECK_CUDA(cudaMalloc(&Cf, ops * 4));
    fill_half<<<4096, 256>>>(Ah, ops, 3); fill_half<<<4096, 256>>>(Bh, ops, 4);
    float fone = 1, fzero = 0;
    t = median_ms([&] { CHECK_BLAS(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, n, n, n, &fone, Bh, CUDA_R_16F, n, Ah, CUDA_R_16F, n, &fzero, Cf, CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT)); }, 10);
    printf("n=%d fp16->fp32 TN: %.3f ms %.0f TFLOPS\n", n, t, flops / t / 1e9);
    // Repeat the default INT8 after the FP16 run (clock state check).
    CHECK_CUDA(cudaFree(Ah)); CHECK_CUDA(cudaFree(Bh)); CHECK_CUDA(cudaFree(Cf));
    fflush(stdout);
  }
  return 0;
}
