/*
 * ckptctl._ckernels: optional compiled kernels for casts and transposes (issue 50).
 *
 * Numeric kernels only: each function reads one buffer and writes another, nothing else (no
 * I/O, no allocation beyond Python's own argument handling). Every length and shape argument
 * is checked against the sizes of the buffers before any element is touched (ValueError
 * otherwise); buffers must be C-contiguous, the destination writable, and the two must not
 * overlap. Elements are loaded and stored with memcpy, so buffers need no alignment. The GIL
 * is released while a kernel runs, so ckptctl's copy threads convert in parallel.
 *
 * The results are bit for bit those of the numpy kernels in ckptctl/dtypes.py (the reference;
 * tests/test_ckernels.py compares both): plain C99 that the compiler vectorises, built with
 * the platform's default floating-point environment (round to nearest even, no flush to zero).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <fenv.h>
#include <stdint.h>
#include <string.h>

/* ---- element kernels (no Python) ---- */

/* Where the compiler and the C library can pick a function's version when the module loads
 * (GCC/Clang function multi-versioning: ifunc, glibc), the cast loops are also built for AVX2
 * (twice the lanes of the SSE2 baseline) and the CPU's own support decides which one runs. */
#if defined(__x86_64__) && defined(__GLIBC__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#endif
#endif
#ifndef VECTOR_CLONES
#define VECTOR_CLONES
#endif

static inline uint32_t load32(const unsigned char *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static inline uint16_t load16(const unsigned char *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static inline void store32(unsigned char *p, uint32_t v) { memcpy(p, &v, 4); }
static inline void store16(unsigned char *p, uint16_t v) { memcpy(p, &v, 2); }

/* F32 -> BF16, half to even; a NaN keeps its sign and top payload bits and becomes quiet. */
VECTOR_CLONES static void
f32_to_bf16_kernel(const unsigned char *restrict src, unsigned char *restrict dst, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        uint32_t bits = load32(src + 4 * i);
        uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
        uint32_t nan = (bits >> 16) | 0x0040u;
        store16(dst + 2 * i, (uint16_t)((bits & 0x7FFFFFFFu) > 0x7F800000u ? nan : rounded));
    }
}

/* F32 -> F16 as numpy's astype(float16): half to even, subnormals, overflow to inf, a NaN keeps
 * its sign and payload's top bits (0x7C01 when those are zero). Normal results: one add rebiases
 * the exponent and rounds; subnormal results: the FPU rounds |x| + 0.5 to the F16 subnormal
 * grid; the smaller of the two is right (dtypes.f16_into explains why). */
VECTOR_CLONES static void
f32_to_f16_kernel(const unsigned char *restrict src, unsigned char *restrict dst, Py_ssize_t n)
{
    /* signed 32-bit lanes: magnitudes are below 2**31, and SSE2 compares only signed ones */
    for (Py_ssize_t i = 0; i < n; i++) {
        uint32_t bits = load32(src + 4 * i);
        int32_t magnitude = (int32_t)(bits & 0x7FFFFFFFu);
        int32_t normal = magnitude < 0x38800000 ? 0x38800000 : magnitude;
        normal = (int32_t)(((uint32_t)normal + (((uint32_t)normal >> 13) & 1u) + 0xC8000FFFu)
                           >> 13);
        float value, sum;
        memcpy(&value, &magnitude, 4);
        sum = value + 0.5f;
        int32_t subnormal;
        memcpy(&subnormal, &sum, 4);
        subnormal -= 0x3F000000;
        int32_t half = normal < subnormal ? normal : subnormal;
        int32_t payload = 0x7C00 + ((magnitude & 0x7FFFFF) >> 13);
        int32_t nan = payload == 0x7C00 ? 0x7C01 : payload;
        int32_t special = magnitude > 0x7F800000 ? nan : 0x7C00;
        half = magnitude >= 0x47800000 ? special : half;
        store16(dst + 2 * i, (uint16_t)((uint32_t)half | ((bits >> 16) & 0x8000u)));
    }
}

/* F16 -> F32 as numpy's astype(float32): exponent and mantissa moved up, rescaled by 2**112
 * (exact, subnormals included); inf and NaN (payload kept, signalling too) set apart. */
VECTOR_CLONES static void
f16_to_f32_kernel(const unsigned char *restrict src, unsigned char *restrict dst, Py_ssize_t n)
{
    const float scale = 5.192296858534828e+33f; /* 2**112 */
    for (Py_ssize_t i = 0; i < n; i++) {
        uint32_t half = load16(src + 2 * i);
        uint32_t sign = (half & 0x8000u) << 16;
        uint32_t rest = half & 0x7FFFu;
        uint32_t moved = rest << 13;
        float value;
        memcpy(&value, &moved, 4);
        value *= scale;
        uint32_t scaled;
        memcpy(&scaled, &value, 4);
        uint32_t special = moved + 0x70000000u;
        store32(dst + 4 * i, (rest >= 0x7C00u ? special : scaled) | sign);
    }
}

/* BF16 -> F32: the bits moved up. */
VECTOR_CLONES static void
bf16_to_f32_kernel(const unsigned char *restrict src, unsigned char *restrict dst, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        store32(dst + 4 * i, (uint32_t)load16(src + 2 * i) << 16);
    }
}

/* Transposes: dst[c * dst_stride + r] = src[r * src_stride + c] for r < rows, c < cols.
 * Blocks of N x N elements (16 bytes a row) are moved in registers: N loads, log2(N) rounds of
 * interleaving (lane i and lane i + N/2 of each pair of registers), N stores; blocks are
 * visited a tile of TILE x TILE elements at a time, so the lines a tile reads and writes stay in
 * L1. The edges that make no whole block are moved one element at a time. */
#ifndef TILE
#define TILE 32
#endif

#if defined(__SSE2__)
#include <emmintrin.h>
#define DEFINE_BLOCK(NAME, N, LO, HI)                                                         \
    static inline void NAME(const unsigned char *s, Py_ssize_t ss, unsigned char *d,          \
                            Py_ssize_t ds)                                                    \
    {                                                                                         \
        __m128i v[N], x[N];                                                                   \
        for (int i = 0; i < N; i++) {                                                         \
            v[i] = _mm_loadu_si128((const __m128i *)(const void *)(s + i * ss));              \
        }                                                                                     \
        for (int round = 1; round < N; round *= 2) {                                          \
            for (int i = 0; i < N / 2; i++) {                                                 \
                x[2 * i] = LO(v[i], v[i + N / 2]);                                            \
                x[2 * i + 1] = HI(v[i], v[i + N / 2]);                                        \
            }                                                                                 \
            for (int i = 0; i < N; i++) {                                                     \
                v[i] = x[i];                                                                  \
            }                                                                                 \
        }                                                                                     \
        for (int i = 0; i < N; i++) {                                                         \
            _mm_storeu_si128((__m128i *)(void *)(d + i * ds), v[i]);                          \
        }                                                                                     \
    }
DEFINE_BLOCK(block8, 16, _mm_unpacklo_epi8, _mm_unpackhi_epi8)
DEFINE_BLOCK(block16, 8, _mm_unpacklo_epi16, _mm_unpackhi_epi16)
DEFINE_BLOCK(block32, 4, _mm_unpacklo_epi32, _mm_unpackhi_epi32)
DEFINE_BLOCK(block64, 2, _mm_unpacklo_epi64, _mm_unpackhi_epi64)
#else /* portable C: the same blocks, element by element */
#define DEFINE_BLOCK(NAME, N, SIZE)                                                           \
    static inline void NAME(const unsigned char *s, Py_ssize_t ss, unsigned char *d,          \
                            Py_ssize_t ds)                                                    \
    {                                                                                         \
        for (int c = 0; c < N; c++) {                                                         \
            for (int r = 0; r < N; r++) {                                                     \
                memcpy(d + c * ds + r * SIZE, s + r * ss + c * SIZE, SIZE);                   \
            }                                                                                 \
        }                                                                                     \
    }
DEFINE_BLOCK(block8, 16, 1)
DEFINE_BLOCK(block16, 8, 2)
DEFINE_BLOCK(block32, 4, 4)
DEFINE_BLOCK(block64, 2, 8)
#endif

/* The elements of rows [r0, r1) and columns [c0, c1), one at a time. */
static void
transpose_edge(const unsigned char *src, unsigned char *dst, Py_ssize_t r0, Py_ssize_t r1,
               Py_ssize_t c0, Py_ssize_t c1, Py_ssize_t ss, Py_ssize_t ds, Py_ssize_t size)
{
    for (Py_ssize_t c = c0; c < c1; c++) {
        for (Py_ssize_t r = r0; r < r1; r++) {
            memcpy(dst + c * ds + r * size, src + r * ss + c * size, (size_t)size);
        }
    }
}

typedef void (*block_kernel)(const unsigned char *, Py_ssize_t, unsigned char *, Py_ssize_t);

/* Strides in bytes here; n elements of size bytes make one 16-byte block row. */
static void
transpose_blocks(const unsigned char *src, unsigned char *dst, Py_ssize_t rows,
                 Py_ssize_t cols, Py_ssize_t ss, Py_ssize_t ds, Py_ssize_t size, Py_ssize_t n,
                 block_kernel block)
{
    Py_ssize_t rows_full = rows - rows % n, cols_full = cols - cols % n;
    for (Py_ssize_t r0 = 0; r0 < rows_full; r0 += TILE) {
        Py_ssize_t r1 = r0 + TILE < rows_full ? r0 + TILE : rows_full;
        for (Py_ssize_t c0 = 0; c0 < cols_full; c0 += TILE) {
            Py_ssize_t c1 = c0 + TILE < cols_full ? c0 + TILE : cols_full;
            for (Py_ssize_t r = r0; r < r1; r += n) {
                for (Py_ssize_t c = c0; c < c1; c += n) {
                    block(src + r * ss + c * size, ss, dst + c * ds + r * size, ds);
                }
            }
        }
    }
    transpose_edge(src, dst, 0, rows_full, cols_full, cols, ss, ds, size);
    transpose_edge(src, dst, rows_full, rows, 0, cols, ss, ds, size);
}

static void
transpose_kernel(const unsigned char *src, unsigned char *dst, Py_ssize_t rows,
                 Py_ssize_t cols, Py_ssize_t src_stride, Py_ssize_t dst_stride, Py_ssize_t size)
{
    Py_ssize_t ss = src_stride * size, ds = dst_stride * size;
    switch (size) {
    case 1: transpose_blocks(src, dst, rows, cols, ss, ds, 1, 16, block8); break;
    case 2: transpose_blocks(src, dst, rows, cols, ss, ds, 2, 8, block16); break;
    case 4: transpose_blocks(src, dst, rows, cols, ss, ds, 4, 4, block32); break;
    default: transpose_blocks(src, dst, rows, cols, ss, ds, 8, 2, block64); break;
    }
}

/* ---- argument checks ---- */

/* Both buffers, C-contiguous, the second writable. 0 on success, -1 with an exception set. */
static int
get_buffers(PyObject *src_obj, PyObject *dst_obj, Py_buffer *src, Py_buffer *dst)
{
    if (PyObject_GetBuffer(src_obj, src, PyBUF_C_CONTIGUOUS) < 0) {
        return -1;
    }
    if (PyObject_GetBuffer(dst_obj, dst, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(src);
        return -1;
    }
    const char *s = src->buf, *d = dst->buf;
    if (src->len && dst->len && s < d + dst->len && d < s + src->len) {
        PyErr_SetString(PyExc_ValueError, "source and destination buffers overlap");
        PyBuffer_Release(src);
        PyBuffer_Release(dst);
        return -1;
    }
    return 0;
}

/* Whether count elements of size bytes fit in a buffer of len bytes (count >= 0). */
static int
fits(Py_ssize_t count, Py_ssize_t size, Py_ssize_t len)
{
    return count >= 0 && count <= len / size;
}

typedef void (*cast_kernel)(const unsigned char *restrict, unsigned char *restrict, Py_ssize_t);

static PyObject *
run_cast(PyObject *args, const char *name, cast_kernel kernel, Py_ssize_t in, Py_ssize_t out)
{
    PyObject *src_obj, *dst_obj;
    Py_ssize_t n;
    Py_buffer src, dst;
    char format[32];
    PyOS_snprintf(format, sizeof format, "OOn:%s", name);
    if (!PyArg_ParseTuple(args, format, &src_obj, &dst_obj, &n)) {
        return NULL;
    }
    if (get_buffers(src_obj, dst_obj, &src, &dst) < 0) {
        return NULL;
    }
    if (!fits(n, in, src.len) || !fits(n, out, dst.len)) {
        PyErr_Format(PyExc_ValueError,
                     "%s: %zd elements do not fit a source of %zd bytes and a destination of "
                     "%zd bytes", name, n, src.len, dst.len);
        PyBuffer_Release(&src);
        PyBuffer_Release(&dst);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    fenv_t env;
    feholdexcept(&env); /* a NaN's arithmetic leaves no flag behind for numpy to report */
    kernel(src.buf, dst.buf, n);
    fesetenv(&env);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&src);
    PyBuffer_Release(&dst);
    Py_RETURN_NONE;
}

static PyObject *
py_f32_to_bf16(PyObject *Py_UNUSED(self), PyObject *args)
{
    return run_cast(args, "f32_to_bf16", f32_to_bf16_kernel, 4, 2);
}

static PyObject *
py_f32_to_f16(PyObject *Py_UNUSED(self), PyObject *args)
{
    return run_cast(args, "f32_to_f16", f32_to_f16_kernel, 4, 2);
}

static PyObject *
py_f16_to_f32(PyObject *Py_UNUSED(self), PyObject *args)
{
    return run_cast(args, "f16_to_f32", f16_to_f32_kernel, 2, 4);
}

static PyObject *
py_bf16_to_f32(PyObject *Py_UNUSED(self), PyObject *args)
{
    return run_cast(args, "bf16_to_f32", bf16_to_f32_kernel, 2, 4);
}

/* Elements a matrix of lines x width with a line stride spans: (lines - 1) * stride + width,
 * 0 when empty; -1 when that overflows or the stride is below the width. */
static Py_ssize_t
span(Py_ssize_t lines, Py_ssize_t width, Py_ssize_t stride)
{
    if (lines < 0 || width < 0 || stride < width) {
        return -1;
    }
    if (lines == 0 || width == 0) {
        return 0;
    }
    if (lines - 1 > (PY_SSIZE_T_MAX - width) / (stride ? stride : 1)) {
        return -1;
    }
    return (lines - 1) * stride + width;
}

static PyObject *
py_transpose(PyObject *Py_UNUSED(self), PyObject *args)
{
    PyObject *src_obj, *dst_obj;
    Py_ssize_t rows, cols, src_stride, dst_stride, size;
    Py_buffer src, dst;
    if (!PyArg_ParseTuple(args, "OOnnnnn:transpose", &src_obj, &dst_obj, &rows, &cols,
                          &src_stride, &dst_stride, &size)) {
        return NULL;
    }
    if (size != 1 && size != 2 && size != 4 && size != 8) {
        PyErr_Format(PyExc_ValueError, "transpose: elements of %zd bytes (1, 2, 4 or 8)", size);
        return NULL;
    }
    if (get_buffers(src_obj, dst_obj, &src, &dst) < 0) {
        return NULL;
    }
    Py_ssize_t need_src = span(rows, cols, src_stride), need_dst = span(cols, rows, dst_stride);
    /* strides in bytes must be representable too, even where a single line never uses them */
    int strides_ok = src_stride <= PY_SSIZE_T_MAX / size && dst_stride <= PY_SSIZE_T_MAX / size;
    if (!strides_ok || need_src < 0 || need_dst < 0 || !fits(need_src, size, src.len)
        || !fits(need_dst, size, dst.len)) {
        PyErr_Format(PyExc_ValueError,
                     "transpose: a [%zd, %zd] matrix (strides %zd, %zd) does not fit a source "
                     "of %zd bytes and a destination of %zd bytes",
                     rows, cols, src_stride, dst_stride, src.len, dst.len);
        PyBuffer_Release(&src);
        PyBuffer_Release(&dst);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    transpose_kernel(src.buf, dst.buf, rows, cols, src_stride, dst_stride, size);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&src);
    PyBuffer_Release(&dst);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"f32_to_bf16", py_f32_to_bf16, METH_VARARGS,
     "f32_to_bf16(src, dst, n): n F32 values to BF16 bits (half to even, NaN kept quiet)."},
    {"f32_to_f16", py_f32_to_f16, METH_VARARGS,
     "f32_to_f16(src, dst, n): n F32 values to F16 bits, as numpy's astype(float16)."},
    {"f16_to_f32", py_f16_to_f32, METH_VARARGS,
     "f16_to_f32(src, dst, n): n F16 values to F32, as numpy's astype(float32)."},
    {"bf16_to_f32", py_bf16_to_f32, METH_VARARGS,
     "bf16_to_f32(src, dst, n): n BF16 values to F32 (exact)."},
    {"transpose", py_transpose, METH_VARARGS,
     "transpose(src, dst, rows, cols, src_stride, dst_stride, itemsize): dst[c, r] = "
     "src[r, c], strides in elements."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_ckernels",
    "Compiled cast and transpose kernels (optional; ckptctl falls back to numpy without them).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__ckernels(void)
{
    return PyModule_Create(&module);
}
