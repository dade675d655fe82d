//! The fuzz targets: one input per seed.

use adrules::linalg::{
    QrMode, RuleOptions, SvdCotangents, SvdMode, eigh_rrule, qr_rrule, svd_rrule,
};
use adrules::strided::{Strided, cache::parse_size};
use adrules::{Backend, Complex64, DType, HostData, HostTensor};
use adrules_testing::fuzz::einsum_case;
use adrules_testing::{Rng, Tolerance, Value, naive_einsum};

use crate::Finding;

const DTYPES: [DType; 4] = [DType::F32, DType::F64, DType::C32, DType::C64];

fn wrong(what: impl Into<String>) -> Finding {
    Finding::Wrong(what.into())
}

/// The einsum of `seed` against the brute-force evaluator.
pub(crate) fn einsum(seed: u64) -> Result<(), Finding> {
    let dtype = DTYPES[(seed / 3 % 4) as usize];
    let (s, shapes) = einsum_case(seed);
    let mut rng = Rng::seed(seed ^ 0x5eed);
    let hosts: Vec<HostTensor> = shapes.iter().map(|d| rng.tensor(d, dtype)).collect();
    let be = Strided;
    let xs: Vec<_> = hosts
        .iter()
        .map(|h| be.from_host(h.clone()))
        .collect::<adrules::Result<_>>()
        .map_err(|e| wrong(format!("from_host: {e}")))?;
    let refs: Vec<_> = xs.iter().collect();
    let ours = adrules::network::einsum(&be, &s, &refs);
    let host_refs: Vec<&HostTensor> = hosts.iter().collect();
    let truth = naive_einsum(&s, &host_refs);
    let case = format!("{s:?} {shapes:?} {dtype}");
    match (ours, truth) {
        (Ok(t), Some(expected)) => {
            let got = be.to_host(&t).map_err(|e| wrong(format!("{case}: {e}")))?;
            if got.dims() != expected.dims() {
                return Err(wrong(format!(
                    "{case}: shape {:?}, expected {:?}",
                    got.dims(),
                    expected.dims()
                )));
            }
            Tolerance::for_dtype(dtype)
                .check(&Value::Tensor(got), &Value::Tensor(expected), &s)
                .map_err(|e| wrong(format!("{case}: {e}")))?;
        }
        (Err(_), None) => {}
        (Ok(_), None) => return Err(wrong(format!("{case}: accepted, torch rejects it"))),
        (Err(e), Some(_)) => {
            return Err(wrong(format!("{case}: rejected ({e}), torch accepts it")));
        }
    }
    for (x, h) in xs.iter().zip(&hosts) {
        if be.to_host(x).ok().as_ref() != Some(h) {
            return Err(Finding::Mutated(format!("{case}: an operand changed")));
        }
    }
    Ok(())
}

/// The kinds of matrices the decompositions are fuzzed on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Random,
    Zero,
    RankOne,
    Degenerate,
    Subnormal,
    Huge,
    Nan,
    Infinite,
}

pub(crate) const KINDS: [Kind; 8] = [
    Kind::Random,
    Kind::Zero,
    Kind::RankOne,
    Kind::Degenerate,
    Kind::Subnormal,
    Kind::Huge,
    Kind::Nan,
    Kind::Infinite,
];

/// `2ᵏ` in two steps (representable for every `k` the kinds use).
fn pow2(k: i32) -> f64 {
    2f64.powi(k / 2) * 2f64.powi(k - k / 2)
}

/// A `[batch…, m, n]` matrix of `kind` in `dtype`.
pub(crate) fn matrix(
    rng: &mut Rng,
    batch: &[usize],
    m: usize,
    n: usize,
    dtype: DType,
    kind: Kind,
) -> HostTensor {
    let mut dims = batch.to_vec();
    dims.extend([m, n]);
    let count: usize = dims.iter().product();
    let base = rng.tensor(&dims, DType::C64).data().to_c64_vec();
    let double = dtype.is_double();
    let mut v: Vec<Complex64> = match kind {
        Kind::Random | Kind::Nan | Kind::Infinite => base,
        Kind::Zero => vec![Complex64::new(0.0, 0.0); count],
        Kind::RankOne => {
            let (x, y) = (rng.tensor(&[m], DType::C64), rng.tensor(&[n], DType::C64));
            let (x, y) = (x.data().to_c64_vec(), y.data().to_c64_vec());
            (0..count)
                .map(|p| x[p / n % m.max(1)] * y[p % n.max(1)].conj())
                .collect()
        }
        Kind::Degenerate => (0..count)
            .map(|p| {
                let (i, j) = (p / n % m.max(1), p % n.max(1));
                Complex64::new(if i == j { 2.5 } else { 0.0 }, 0.0)
            })
            .collect(),
        Kind::Subnormal => {
            let f = if double { pow2(-1030) } else { pow2(-135) };
            base.iter().map(|z| z * f).collect()
        }
        Kind::Huge => {
            let f = if double { pow2(1000) } else { pow2(120) };
            base.iter().map(|z| z * f).collect()
        }
    };
    if count > 0 {
        let p = rng.below(count);
        match kind {
            Kind::Nan => v[p] = Complex64::new(f64::NAN, 0.0),
            Kind::Infinite => v[p] = Complex64::new(0.0, f64::NEG_INFINITY),
            _ => {}
        }
    }
    HostTensor::new(&dims, HostData::from_c64_projected(&v, dtype)).expect("valid shape")
}

/// `(A + Aᴴ)/2` for each matrix of a square batch.
pub(crate) fn hermitian(a: &HostTensor) -> HostTensor {
    let dims = a.dims().to_vec();
    let n = dims[dims.len() - 1];
    let v = a.data().to_c64_vec();
    let h: Vec<Complex64> = (0..v.len())
        .map(|p| {
            let (b, i, j) = (p / (n * n), p / n % n, p % n);
            (v[p] + v[b * n * n + j * n + i].conj()) * 0.5
        })
        .collect();
    HostTensor::new(&dims, HostData::from_c64_projected(&h, a.dtype())).expect("valid shape")
}

/// The same dtype, shape and bits (a NaN equals itself).
pub(crate) fn same(x: &HostTensor, y: &HostTensor) -> bool {
    let bits = |h: &HostTensor| -> Vec<(u64, u64)> {
        h.data()
            .to_c64_vec()
            .iter()
            .map(|z| (z.re.to_bits(), z.im.to_bits()))
            .collect()
    };
    x.dtype() == y.dtype() && x.dims() == y.dims() && bits(x) == bits(y)
}

pub(crate) fn finite(h: &HostTensor) -> bool {
    h.data()
        .to_c64_vec()
        .iter()
        .all(|z| z.re.is_finite() && z.im.is_finite())
}

/// `max |x − y| / max(max |y|, tiny)` of two equally shaped host tensors.
pub(crate) fn rel_err(x: &[Complex64], y: &[Complex64]) -> f64 {
    let scale = y.iter().fold(0.0f64, |a, z| a.max(z.norm()));
    let err = x
        .iter()
        .zip(y)
        .fold(0.0f64, |a, (p, q)| a.max((p - q).norm()));
    if scale == 0.0 { err } else { err / scale }
}

/// The product of `[batch, m, k]`, a diagonal `[batch, k]` (or none) and `[batch, k, n]`.
fn product(
    x: &[Complex64],
    d: Option<&[Complex64]>,
    y: &[Complex64],
    (count, m, k, n): (usize, usize, usize, usize),
) -> Vec<Complex64> {
    let mut out = vec![Complex64::new(0.0, 0.0); count * m * n];
    for b in 0..count {
        for i in 0..m {
            for j in 0..n {
                let mut acc = Complex64::new(0.0, 0.0);
                for l in 0..k {
                    let w = d.map_or(Complex64::new(1.0, 0.0), |d| d[b * k + l]);
                    acc += x[b * m * k + i * k + l] * w * y[b * k * n + l * n + j];
                }
                out[b * m * n + i * n + j] = acc;
            }
        }
    }
    out
}

/// The number of elements of the matrix of [`linalg`]'s input `seed` (its first draws).
pub(crate) fn linalg_size(seed: u64) -> usize {
    let mut rng = Rng::seed(seed);
    let _dtype = rng.below(4);
    let _kind = rng.below(KINDS.len());
    let (m, n) = (rng.below(5), rng.below(5));
    let batch = if rng.below(4) == 0 { 2 } else { 1 };
    let square = rng.below(5) == 4;
    batch * m * if square { m } else { n }
}

/// The decomposition of `seed` and a pullback through it.
pub(crate) fn linalg(seed: u64) -> Result<(), Finding> {
    let mut rng = Rng::seed(seed);
    let dtype = DTYPES[rng.below(4)];
    let kind = KINDS[rng.below(KINDS.len())];
    let (m, n) = (rng.below(5), rng.below(5));
    let batch: Vec<usize> = if rng.below(4) == 0 { vec![2] } else { vec![] };
    let op = rng.below(5);
    let square = op == 4;
    let n = if square { m } else { n };
    let mut a = matrix(&mut rng, &batch, m, n, dtype, kind);
    if square && finite(&a) {
        a = hermitian(&a);
    }
    let count: usize = batch.iter().product();
    let k = m.min(n);
    let case = format!("op {op} {kind:?} {dtype} {batch:?} {m}×{n}");
    let be = Strided;
    let x = be
        .from_host(a.clone())
        .map_err(|e| wrong(format!("{case}: from_host: {e}")))?;
    let tol = if dtype.is_double() { 1e-9 } else { 2e-3 };
    let opts = RuleOptions::default();
    let host = |t: &adrules::strided::Tensor| {
        be.to_host(t)
            .map_err(|e| wrong(format!("{case}: to_host: {e}")))
    };
    // the factors, and the reconstruction they must give
    let outcome: adrules::Result<(Vec<HostTensor>, Vec<Complex64>, Option<HostTensor>)> = match op {
        0 | 1 => {
            let mode = if op == 0 {
                SvdMode::Thin
            } else {
                SvdMode::Full
            };
            svd_rrule(&be, &x, mode, opts).and_then(|(out, pb)| {
                let (u, s, vh) = (host(&out.u), host(&out.s), host(&out.vh));
                let (u, s, vh) = match (u, s, vh) {
                    (Ok(u), Ok(s), Ok(vh)) => (u, s, vh),
                    _ => return Err(adrules::Error::invalid("fuzz", "to_host failed")),
                };
                let (ku, kv) = if op == 0 { (k, k) } else { (m, n) };
                let (uv, vhv) = (u.data().to_c64_vec(), vh.data().to_c64_vec());
                // the first k columns of U and rows of Vh
                let uk: Vec<Complex64> = (0..count * m * k)
                    .map(|p| uv[p / (m * k) * m * ku + p / k % m * ku + p % k])
                    .collect();
                let vk: Vec<Complex64> = (0..count * k * n)
                    .map(|p| vhv[p / (k * n) * kv * n + p % (k * n)])
                    .collect();
                let rec = product(&uk, Some(&s.data().to_c64_vec()), &vk, (count, m, k, n));
                let sbar = rng.tensor(s.dims(), dtype.real());
                let g = pb.pullback(SvdCotangents {
                    s: Some(&be.from_host(sbar)?),
                    ..Default::default()
                });
                Ok((
                    vec![u, s, vh],
                    rec,
                    g.ok().map(|g| be.to_host(&g)).transpose()?,
                ))
            })
        }
        2 | 3 => {
            let mode = if op == 2 {
                QrMode::Reduced
            } else {
                QrMode::Complete
            };
            qr_rrule(&be, &x, mode).and_then(|(out, pb)| {
                let (q, r) = (be.to_host(&out.q)?, be.to_host(&out.r)?);
                let kq = if op == 2 { k } else { m };
                let rec = product(
                    &q.data().to_c64_vec(),
                    None,
                    &r.data().to_c64_vec(),
                    (count, m, kq, n),
                );
                let rbar = rng.tensor(r.dims(), dtype);
                let g = pb.pullback(None, Some(&be.from_host(rbar)?));
                Ok((vec![q, r], rec, g.ok().map(|g| be.to_host(&g)).transpose()?))
            })
        }
        _ => eigh_rrule(&be, &x, opts).and_then(|(out, pb)| {
            let (l, v) = (be.to_host(&out.values)?, be.to_host(&out.vectors)?);
            let vv = v.data().to_c64_vec();
            let vh: Vec<Complex64> = (0..vv.len())
                .map(|p| {
                    let (b, i, j) = (p / (n * n), p / n % n, p % n);
                    vv[b * n * n + j * n + i].conj()
                })
                .collect();
            let rec = product(&vv, Some(&l.data().to_c64_vec()), &vh, (count, n, n, n));
            let lbar = rng.tensor(l.dims(), dtype.real());
            let g = pb.pullback(Some(&be.from_host(lbar)?), None);
            Ok((vec![l, v], rec, g.ok().map(|g| be.to_host(&g)).transpose()?))
        }),
    };
    let input_finite = finite(&a);
    match outcome {
        Err(e) => {
            if input_finite && !matches!(kind, Kind::Zero | Kind::RankOne | Kind::Degenerate) {
                // a finite, generic input: only an overflow of the result may refuse it
                if !matches!(e, adrules::Error::NonFinite { .. }) {
                    return Err(wrong(format!("{case}: refused: {e}")));
                }
            }
        }
        Ok(_) if !input_finite => {
            return Err(wrong(format!("{case}: a non-finite input was accepted")));
        }
        Ok((factors, rec, grad)) => {
            for f in &factors {
                if !finite(f) {
                    return Err(wrong(format!("{case}: a non-finite factor")));
                }
            }
            let r = rel_err(&rec, &a.data().to_c64_vec());
            if r > tol {
                return Err(wrong(format!("{case}: the factors reconstruct A to {r:e}")));
            }
            if let Some(g) = grad
                && !finite(&g)
            {
                return Err(wrong(format!("{case}: a non-finite cotangent")));
            }
        }
    }
    if !be.to_host(&x).is_ok_and(|h| same(&h, &a)) {
        return Err(Finding::Mutated(format!("{case}: the input changed")));
    }
    Ok(())
}

const UNITS: [(&str, u128); 10] = [
    ("", 1),
    ("B", 1),
    ("KiB", 1 << 10),
    ("MiB", 1 << 20),
    ("GiB", 1 << 30),
    ("TiB", 1 << 40),
    ("kB", 1_000),
    ("MB", 1_000_000),
    ("GB", 1_000_000_000),
    ("TB", 1_000_000_000_000),
];

/// The text of [`sizes`]' input `seed` and, when it is well formed, its value.
fn size_text(seed: u64) -> (String, Option<Option<u128>>) {
    let mut rng = Rng::seed(seed);
    if rng.below(2) == 0 {
        let (unit, mult) = UNITS[rng.below(UNITS.len())];
        let digits = 1 + rng.below(20);
        let number: String = (0..digits)
            .map(|_| char::from(b'0' + rng.below(10) as u8))
            .collect();
        let space = if rng.below(2) == 0 { " " } else { "" };
        let expected = number.parse::<u128>().ok().map(|v| v * mult);
        (format!("{number}{space}{unit}"), Some(expected))
    } else {
        const CHARS: &[u8] = b"0123456789.. -+eExXkKmMgGtTiIbB\t\xc3\xa9";
        let len = rng.below(12);
        let bytes: Vec<u8> = (0..len).map(|_| CHARS[rng.below(CHARS.len())]).collect();
        (String::from_utf8_lossy(&bytes).into_owned(), None)
    }
}

/// The length of [`sizes`]' input text.
pub(crate) fn sizes_size(seed: u64) -> usize {
    size_text(seed).0.len()
}

/// The size text of `seed`: well formed (its value must come back) or random characters
/// (it must not panic).
pub(crate) fn sizes(seed: u64) -> Result<(), Finding> {
    match size_text(seed) {
        (text, Some(expected)) => match (parse_size("size", &text), expected) {
            (Ok(v), Some(e)) if v as u128 == e => Ok(()),
            (Err(_), Some(e)) if e > usize::MAX as u128 => Ok(()),
            (r, e) => Err(wrong(format!("{text:?}: {r:?}, expected {e:?}"))),
        },
        (text, None) => {
            // any outcome but a panic; a signed text must be refused
            if let Ok(v) = parse_size("size", &text)
                && text.trim().starts_with(['-', '+'])
            {
                return Err(wrong(format!("{text:?}: a signed size accepted as {v}")));
            }
            Ok(())
        }
    }
}
