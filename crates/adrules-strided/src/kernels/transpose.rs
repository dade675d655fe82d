//! Transposing tile copies: `dst[v][u] = src[u][v]`, the heart of the permuted add.
//!
//! `src` is contiguous along `v` (row stride `ld_src` along `u`), `dst` is contiguous along
//! `u` (row stride `ld_dst` along `v`). Full `R×R` tiles go through an in-register transpose
//! micro-kernel (AVX-512: one 64-byte cache line per row, so `R = 64 / size_of::<T>()`; AVX2:
//! 32-byte rows), selected at run time with `is_x86_feature_detected!`; edges and other CPUs
//! use a portable blocked loop. With `stream`, full rows are written with non-temporal
//! (streaming) stores that bypass the cache: the caller asks for them only for large outputs
//! that are not read back soon, and must issue a store fence ([`fence`]) before the data is
//! read by another thread.

/// The instruction set the micro-kernels use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Simd {
    /// 512-bit registers (`avx512f`)
    Avx512,
    /// 256-bit registers (`avx` and `avx2`)
    Avx2,
    /// no vector micro-kernel: the portable loop
    Portable,
}

impl Simd {
    /// The best level the running CPU offers.
    pub(crate) fn detect() -> Simd {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f") {
                return Simd::Avx512;
            }
            if std::arch::is_x86_feature_detected!("avx2") {
                return Simd::Avx2;
            }
        }
        Simd::Portable
    }

    /// Bytes per vector register (one tile row), 0 for the portable path.
    fn width(self) -> usize {
        match self {
            Simd::Avx512 => 64,
            Simd::Avx2 => 32,
            Simd::Portable => 0,
        }
    }
}

/// Orders earlier streaming stores before later stores (`sfence`); a no-op elsewhere.
pub(crate) fn fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `sfence` is part of SSE, which every x86_64 CPU has.
    unsafe {
        std::arch::x86_64::_mm_sfence()
    }
}

/// Width in bytes of a band of C columns (A rows) transposed in one pass: C rows are written
/// in segments of this length, and this many A rows are read concurrently.
const BAND_BYTES: usize = 512;
/// How far ahead along an A row the next lines are prefetched. Measured on AMD Zen 5: two
/// lines ahead doubles the throughput of strided tiles, one line is too late, four are no
/// better.
const PREFETCH_BYTES: usize = 128;

/// Portable transposing copy of the block `v ∈ v0..v1`, `u ∈ u0..u1`.
///
/// # Safety
/// As [`transpose`].
#[allow(clippy::too_many_arguments)]
unsafe fn portable<T: Copy>(
    src: *const T,
    src_rows: &[isize],
    dst: *mut T,
    dst_rows: &[isize],
    (v0, v1): (usize, usize),
    (u0, u1): (usize, usize),
) {
    for (v, &d) in dst_rows.iter().enumerate().take(v1).skip(v0) {
        for (u, &r) in src_rows.iter().enumerate().take(u1).skip(u0) {
            // SAFETY: (v, u) is inside the tile the caller vouches for.
            unsafe { *dst.offset(d + u as isize) = *src.offset(r + v as isize) };
        }
    }
}

/// Transposing copy of a tile given by row tables: `dst[dst_rows[v] + u] = src[src_rows[u] + v]`
/// for `v < dst_rows.len()`, `u < src_rows.len()`. `src` rows are contiguous along `v`, `dst`
/// rows along `u`; the tables let one tile span several axes.
///
/// With `stream`, full register rows are written with streaming stores: the first columns
/// are peeled so that rows start on a register boundary (callers ask for streaming only when
/// every `dst_rows[v]` is a multiple of the register width); the caller must [`fence`]
/// afterwards.
///
/// # Safety
/// Every addressed element is valid (`src` for reads, `dst` for writes), and the two sides
/// do not overlap.
pub(crate) unsafe fn transpose<T: Copy>(
    src: *const T,
    src_rows: &[isize],
    dst: *mut T,
    dst_rows: &[isize],
    stream: bool,
    simd: Simd,
) {
    let (nv, nu) = (dst_rows.len(), src_rows.len());
    let w = size_of::<T>();
    let width = simd.width();
    let r = if width == 0 || !matches!(w, 4 | 8 | 16) {
        0
    } else {
        width / w
    };
    if r == 0 || nv < r || nu < r {
        // SAFETY: forwarded.
        return unsafe { portable(src, src_rows, dst, dst_rows, (0, nv), (0, nu)) };
    }
    let misalign = dst as usize % width;
    let stream = stream && misalign.is_multiple_of(w);
    let peel = if stream {
        (((width - misalign) % width) / w).min(nu)
    } else {
        0
    };
    let nu_full = peel + (nu - peel) / r * r;
    let nv_full = nv / r * r;
    // SAFETY: every block below lies inside the tile the caller vouches for.
    unsafe {
        portable(src, src_rows, dst, dst_rows, (0, nv), (0, peel));
        // Bands of C columns (A rows) outermost: the band's A rows are read front to back
        // (software prefetch runs ahead of each), while every C row receives a segment of
        // `band` elements per pass.
        let band = (BAND_BYTES / w).max(r);
        for ub in (peel..nu_full).step_by(band) {
            for v0 in (0..nv_full).step_by(r) {
                let mut d = [std::ptr::null_mut::<u8>(); 16];
                for (j, dj) in d.iter_mut().enumerate().take(r) {
                    *dj = dst.offset(dst_rows[v0 + j]).cast();
                }
                for u0 in (ub..(ub + band).min(nu_full)).step_by(r) {
                    let mut s = [std::ptr::null::<u8>(); 16];
                    for (i, si) in s.iter_mut().enumerate().take(r) {
                        *si = src.offset(src_rows[u0 + i] + v0 as isize).cast();
                        prefetch(si.wrapping_add(PREFETCH_BYTES));
                    }
                    micro(simd, w, &s, &d, u0 * w, stream);
                }
            }
        }
        portable(src, src_rows, dst, dst_rows, (0, nv), (nu_full, nu));
        portable(src, src_rows, dst, dst_rows, (nv_full, nv), (peel, nu_full));
    }
}

/// Prefetches the cache line at `p` into L1.
#[inline(always)]
fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: prefetching never faults, whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast())
    }
}

/// One full register tile: row `i` of the source at `s[i]`, row `j` of the destination at
/// `d[j] + off` (bytes).
///
/// # Safety
/// `simd` is supported by the CPU; the tiles are valid and disjoint; with `stream`, every
/// destination row is aligned to the register width.
unsafe fn micro(
    simd: Simd,
    w: usize,
    s: &[*const u8; 16],
    d: &[*mut u8; 16],
    off: usize,
    stream: bool,
) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: forwarded; the element size selects the kernel of that lane width.
    unsafe {
        match (simd, w) {
            (Simd::Avx512, 4) => x86::t16_b32(s, d, off, stream),
            (Simd::Avx512, 8) => x86::t8_b64(s, d, off, stream),
            (Simd::Avx512, 16) => x86::t4_b128(s, d, off, stream),
            (Simd::Avx2, 4) => x86::t8_b32(s, d, off, stream),
            (Simd::Avx2, 8) => x86::t4_b64(s, d, off, stream),
            (Simd::Avx2, 16) => x86::t2_b128(s, d, off, stream),
            _ => unreachable!("micro-kernels exist for 4-, 8- and 16-byte lanes only"),
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (simd, w, s, d, off, stream);
        unreachable!("no vector micro-kernel on this architecture");
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    //! In-register transposes. Row `i` of the source tile is loaded into register `r[i]`;
    //! after the shuffles, register `o[j]` holds column `j` and is stored as row `j` of the
    //! destination. The shuffle networks are the classic ones (unpack lo/hi within 128-bit
    //! lanes, then 128-bit lane shuffles).
    use std::arch::x86_64::*;

    macro_rules! store {
        ($stream:expr, $st:ident, $su:ident, $p:expr, $v:expr) => {
            if $stream {
                $st($p.cast(), $v)
            } else {
                $su($p.cast(), $v)
            }
        };
    }

    type Rows = [*const u8; 16];
    type RowsMut = [*mut u8; 16];

    /// 16×16 tile of 32-bit lanes.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn t16_b32(s: &Rows, d: &RowsMut, off: usize, stream: bool) {
        // SAFETY: the caller vouches for the 16 rows of 16 lanes on both sides.
        unsafe {
            let r: [__m512; 16] = std::array::from_fn(|i| _mm512_loadu_ps(s[i].cast()));
            let t: [__m512; 16] = std::array::from_fn(|i| {
                let (a, b) = (r[i & !1], r[i | 1]);
                if i % 2 == 0 {
                    _mm512_unpacklo_ps(a, b)
                } else {
                    _mm512_unpackhi_ps(a, b)
                }
            });
            // u[4k + c] holds, in 128-bit lane l, column 4l + c of rows 4k..4k+4.
            let u: [__m512d; 16] = std::array::from_fn(|i| {
                let (k, c) = (i / 4, i % 4);
                let (a, b) = (
                    _mm512_castps_pd(t[4 * k + c / 2]),
                    _mm512_castps_pd(t[4 * k + c / 2 + 2]),
                );
                if c % 2 == 0 {
                    _mm512_unpacklo_pd(a, b)
                } else {
                    _mm512_unpackhi_pd(a, b)
                }
            });
            for c in 0..4 {
                let x0 = _mm512_shuffle_f64x2::<0x44>(u[c], u[4 + c]);
                let x1 = _mm512_shuffle_f64x2::<0xee>(u[c], u[4 + c]);
                let x2 = _mm512_shuffle_f64x2::<0x44>(u[8 + c], u[12 + c]);
                let x3 = _mm512_shuffle_f64x2::<0xee>(u[8 + c], u[12 + c]);
                let cols = [
                    _mm512_shuffle_f64x2::<0x88>(x0, x2),
                    _mm512_shuffle_f64x2::<0xdd>(x0, x2),
                    _mm512_shuffle_f64x2::<0x88>(x1, x3),
                    _mm512_shuffle_f64x2::<0xdd>(x1, x3),
                ];
                for (l, v) in cols.into_iter().enumerate() {
                    let p = d[4 * l + c].add(off);
                    store!(
                        stream,
                        _mm512_stream_ps,
                        _mm512_storeu_ps,
                        p,
                        _mm512_castpd_ps(v)
                    );
                }
            }
        }
    }

    /// 8×8 tile of 64-bit lanes.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn t8_b64(s: &Rows, d: &RowsMut, off: usize, stream: bool) {
        // SAFETY: the caller vouches for the 8 rows of 8 lanes on both sides.
        unsafe {
            let r: [__m512d; 8] = std::array::from_fn(|i| _mm512_loadu_pd(s[i].cast()));
            let t: [__m512d; 8] = std::array::from_fn(|i| {
                let (a, b) = (r[i & !1], r[i | 1]);
                if i % 2 == 0 {
                    _mm512_unpacklo_pd(a, b)
                } else {
                    _mm512_unpackhi_pd(a, b)
                }
            });
            // u[c] (rows 0..4) and u[4 + c] (rows 4..8) hold column c in their 128-bit lanes
            // 0 and 2 and column c + 4 in lanes 1 and 3.
            let u: [__m512d; 8] = std::array::from_fn(|i| {
                let (h, c) = (i / 4, i % 4);
                let (a, b) = (t[4 * h + c % 2], t[4 * h + c % 2 + 2]);
                if c < 2 {
                    _mm512_shuffle_f64x2::<0x88>(a, b)
                } else {
                    _mm512_shuffle_f64x2::<0xdd>(a, b)
                }
            });
            for c in 0..4 {
                let lo = _mm512_shuffle_f64x2::<0x88>(u[c], u[4 + c]);
                let hi = _mm512_shuffle_f64x2::<0xdd>(u[c], u[4 + c]);
                store!(
                    stream,
                    _mm512_stream_pd,
                    _mm512_storeu_pd,
                    d[c].add(off),
                    lo
                );
                store!(
                    stream,
                    _mm512_stream_pd,
                    _mm512_storeu_pd,
                    d[c + 4].add(off),
                    hi
                );
            }
        }
    }

    /// 4×4 tile of 128-bit lanes (two f64 each).
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn t4_b128(s: &Rows, d: &RowsMut, off: usize, stream: bool) {
        // SAFETY: the caller vouches for the 4 rows of 4 lanes on both sides.
        unsafe {
            let r: [__m512d; 4] = std::array::from_fn(|i| _mm512_loadu_pd(s[i].cast()));
            let x0 = _mm512_shuffle_f64x2::<0x44>(r[0], r[1]);
            let x1 = _mm512_shuffle_f64x2::<0xee>(r[0], r[1]);
            let x2 = _mm512_shuffle_f64x2::<0x44>(r[2], r[3]);
            let x3 = _mm512_shuffle_f64x2::<0xee>(r[2], r[3]);
            let cols = [
                _mm512_shuffle_f64x2::<0x88>(x0, x2),
                _mm512_shuffle_f64x2::<0xdd>(x0, x2),
                _mm512_shuffle_f64x2::<0x88>(x1, x3),
                _mm512_shuffle_f64x2::<0xdd>(x1, x3),
            ];
            for (j, v) in cols.into_iter().enumerate() {
                store!(stream, _mm512_stream_pd, _mm512_storeu_pd, d[j].add(off), v);
            }
        }
    }

    /// 8×8 tile of 32-bit lanes (AVX2).
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn t8_b32(s: &Rows, d: &RowsMut, off: usize, stream: bool) {
        // SAFETY: the caller vouches for the 8 rows of 8 lanes on both sides.
        unsafe {
            let r: [__m256; 8] = std::array::from_fn(|i| _mm256_loadu_ps(s[i].cast()));
            let t: [__m256; 8] = std::array::from_fn(|i| {
                let (a, b) = (r[i & !1], r[i | 1]);
                if i % 2 == 0 {
                    _mm256_unpacklo_ps(a, b)
                } else {
                    _mm256_unpackhi_ps(a, b)
                }
            });
            let u: [__m256d; 8] = std::array::from_fn(|i| {
                let (k, c) = (i / 4, i % 4);
                let (a, b) = (
                    _mm256_castps_pd(t[4 * k + c / 2]),
                    _mm256_castps_pd(t[4 * k + c / 2 + 2]),
                );
                if c % 2 == 0 {
                    _mm256_unpacklo_pd(a, b)
                } else {
                    _mm256_unpackhi_pd(a, b)
                }
            });
            for c in 0..4 {
                let lo = _mm256_castpd_ps(_mm256_permute2f128_pd::<0x20>(u[c], u[4 + c]));
                let hi = _mm256_castpd_ps(_mm256_permute2f128_pd::<0x31>(u[c], u[4 + c]));
                store!(
                    stream,
                    _mm256_stream_ps,
                    _mm256_storeu_ps,
                    d[c].add(off),
                    lo
                );
                store!(
                    stream,
                    _mm256_stream_ps,
                    _mm256_storeu_ps,
                    d[c + 4].add(off),
                    hi
                );
            }
        }
    }

    /// 4×4 tile of 64-bit lanes (AVX2).
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn t4_b64(s: &Rows, d: &RowsMut, off: usize, stream: bool) {
        // SAFETY: the caller vouches for the 4 rows of 4 lanes on both sides.
        unsafe {
            let r: [__m256d; 4] = std::array::from_fn(|i| _mm256_loadu_pd(s[i].cast()));
            let t0 = _mm256_unpacklo_pd(r[0], r[1]);
            let t1 = _mm256_unpackhi_pd(r[0], r[1]);
            let t2 = _mm256_unpacklo_pd(r[2], r[3]);
            let t3 = _mm256_unpackhi_pd(r[2], r[3]);
            let cols = [
                _mm256_permute2f128_pd::<0x20>(t0, t2),
                _mm256_permute2f128_pd::<0x20>(t1, t3),
                _mm256_permute2f128_pd::<0x31>(t0, t2),
                _mm256_permute2f128_pd::<0x31>(t1, t3),
            ];
            for (j, v) in cols.into_iter().enumerate() {
                store!(stream, _mm256_stream_pd, _mm256_storeu_pd, d[j].add(off), v);
            }
        }
    }

    /// 2×2 tile of 128-bit lanes (AVX2).
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn t2_b128(s: &Rows, d: &RowsMut, off: usize, stream: bool) {
        // SAFETY: the caller vouches for the 2 rows of 2 lanes on both sides.
        unsafe {
            let r0 = _mm256_loadu_pd(s[0].cast());
            let r1 = _mm256_loadu_pd(s[1].cast());
            let c0 = _mm256_permute2f128_pd::<0x20>(r0, r1);
            let c1 = _mm256_permute2f128_pd::<0x31>(r0, r1);
            store!(
                stream,
                _mm256_stream_pd,
                _mm256_storeu_pd,
                d[0].add(off),
                c0
            );
            store!(
                stream,
                _mm256_stream_pd,
                _mm256_storeu_pd,
                d[1].add(off),
                c1
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use adrules_core::{Complex32, Complex64};

    /// Every level the CPU offers, the portable one included.
    fn levels() -> Vec<Simd> {
        let mut v = vec![Simd::Portable];
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx2") {
                v.push(Simd::Avx2);
            }
            if std::arch::is_x86_feature_detected!("avx512f") {
                v.push(Simd::Avx512);
            }
        }
        v
    }

    fn check<T: Copy + PartialEq + std::fmt::Debug>(make: impl Fn(usize) -> T) {
        for simd in levels() {
            for (nv, nu, stream) in [
                (37, 45, false),
                (16, 16, true),
                (33, 150, true),
                (5, 3, false),
            ] {
                let (ld_src, ld_dst) = (nv + 3, (nu + 8usize).next_multiple_of(16));
                let src: Vec<T> = (0..nu * ld_src).map(&make).collect();
                let mut dst: Vec<T> = (0..nv * ld_dst).map(|_| make(usize::MAX / 2)).collect();
                // irregular source rows (reversed), regular destination rows
                let src_rows: Vec<isize> = (0..nu).rev().map(|u| (u * ld_src) as isize).collect();
                let dst_rows: Vec<isize> = (0..nv).map(|v| (v * ld_dst) as isize).collect();
                // SAFETY: both buffers hold the rows of these tables.
                unsafe {
                    transpose(
                        src.as_ptr(),
                        &src_rows,
                        dst.as_mut_ptr(),
                        &dst_rows,
                        stream,
                        simd,
                    )
                };
                fence();
                for v in 0..nv {
                    for u in 0..nu {
                        let expected = src[src_rows[u] as usize + v];
                        assert_eq!(
                            dst[v * ld_dst + u],
                            expected,
                            "{simd:?} {nv}x{nu} at ({v}, {u})"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn transposes_every_lane_width() {
        check(|i| i as f32);
        check(|i| i as f64);
        check(|i| Complex32::new(i as f32, -(i as f32)));
        check(|i| Complex64::new(i as f64, 0.5 - i as f64));
    }
}
