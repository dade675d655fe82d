//! [`ReferenceBackend`]: a deliberately naive implementation of [`Backend`] on host memory.
//!
//! Every primitive is a plain loop over multi-indices computed in `Complex64` arithmetic and
//! projected to the output dtype, written straight from the formulas (`adrules_core::math`)
//! with no blocking, fusion or reordering. It is the "naive loop reference" that fast backends are property-tested against, and a backend on which rules
//! written by downstream crates can be checked without any engine.

use std::sync::Arc;

use adrules_core::backend::check;
use adrules_core::{
    Backend, Complex64, Conj, ContractSpec, DType, Dims, DynScalar, Error, HostData, HostTensor,
    Permutation, Result, TraceSpec,
};

/// The naive host backend. Its tensor is an `Arc<HostTensor>` (copy-on-write on update).
#[derive(Clone, Copy, Debug, Default)]
pub struct ReferenceBackend;

/// Row-major strides of `dims`.
pub fn row_major_strides(dims: &[usize]) -> Vec<usize> {
    let mut s = vec![0; dims.len()];
    let mut acc = 1;
    for (k, &d) in dims.iter().enumerate().rev() {
        s[k] = acc;
        acc *= d;
    }
    s
}

/// Calls `f` with every multi-index of `dims` in row-major order (once, with an empty index,
/// for rank 0; never when a dimension is zero).
pub fn for_each_index(dims: &[usize], mut f: impl FnMut(&[usize])) {
    if dims.contains(&0) {
        return;
    }
    let mut idx = vec![0usize; dims.len()];
    loop {
        f(&idx);
        let mut k = dims.len();
        loop {
            if k == 0 {
                return;
            }
            k -= 1;
            idx[k] += 1;
            if idx[k] < dims[k] {
                break;
            }
            idx[k] = 0;
        }
    }
}

fn offset(idx: &[usize], strides: &[usize]) -> usize {
    idx.iter().zip(strides).map(|(i, s)| i * s).sum()
}

fn opc(z: Complex64, conj: Conj) -> Complex64 {
    if conj.is_conj() { z.conj() } else { z }
}

fn check_alias(
    (output, out): (&str, &Arc<HostTensor>),
    other: &Arc<HostTensor>,
    input: &str,
) -> Result<()> {
    if Arc::ptr_eq(out, other) {
        Err(Error::Aliasing {
            output: output.into(),
            input: input.into(),
        })
    } else {
        Ok(())
    }
}

/// Writes `C[i] ← β·C[i] + f(i)` for every row-major index `i` of C (strong zero in β; β
/// already checked against C's dtype by the caller).
fn update(
    c: &mut Arc<HostTensor>,
    beta: DynScalar,
    f: impl Fn(&[usize]) -> Complex64,
) -> Result<()> {
    let dtype = c.dtype();
    let dims: Vec<usize> = c.dims().to_vec();
    let old = c.data().to_c64_vec();
    let b = beta.to_c64();
    let strong_zero = beta.is_zero();
    let mut new = vec![Complex64::new(0.0, 0.0); old.len()];
    let strides = row_major_strides(&dims);
    for_each_index(&dims, |i| {
        let o = offset(i, &strides);
        let prev = if strong_zero {
            Complex64::new(0.0, 0.0)
        } else {
            b * old[o]
        };
        new[o] = prev + f(i);
    });
    *Arc::make_mut(c) = HostTensor::new(&dims, HostData::from_c64_projected(&new, dtype))?;
    Ok(())
}

impl ReferenceBackend {
    #[allow(clippy::too_many_arguments)]
    fn add_impl(
        &self,
        c: &mut Arc<HostTensor>,
        a: &Arc<HostTensor>,
        p: &Permutation,
        conj: Conj,
        alpha: DynScalar,
        beta: DynScalar,
        project: bool,
    ) -> Result<()> {
        if project {
            check::add_projected(self, c, a, p, beta)?;
        } else {
            check::add(self, c, a, p, alpha, beta)?;
        }
        check_alias(("c", c), a, "a")?;
        let av = a.data().to_c64_vec();
        let sa = row_major_strides(a.dims());
        let al = alpha.to_c64();
        let ps = p.as_slice().to_vec();
        update(c, beta, |i| {
            let mut j = vec![0; ps.len()];
            for (m, &pm) in ps.iter().enumerate() {
                j[pm] = i[m];
            }
            al * opc(av[offset(&j, &sa)], conj)
        })
    }
}

impl Backend for ReferenceBackend {
    type Tensor = Arc<HostTensor>;

    fn name(&self) -> &'static str {
        "reference"
    }

    fn dtypes(&self) -> &'static [DType] {
        &DType::ALL
    }

    fn dims(&self, t: &Self::Tensor) -> Dims {
        t.dims().iter().copied().collect()
    }

    fn dtype(&self, t: &Self::Tensor) -> DType {
        t.dtype()
    }

    fn zeros(&self, dims: &[usize], dtype: DType) -> Result<Self::Tensor> {
        Ok(Arc::new(HostTensor::zeros(dims, dtype)?))
    }

    fn to_host(&self, t: &Self::Tensor) -> Result<HostTensor> {
        Ok((**t).clone())
    }

    fn from_host(&self, h: HostTensor) -> Result<Self::Tensor> {
        Ok(Arc::new(h))
    }

    fn add(
        &self,
        c: &mut Self::Tensor,
        a: &Self::Tensor,
        p: &Permutation,
        conj: Conj,
        alpha: DynScalar,
        beta: DynScalar,
    ) -> Result<()> {
        self.add_impl(c, a, p, conj, alpha, beta, false)
    }

    fn add_projected(
        &self,
        c: &mut Self::Tensor,
        a: &Self::Tensor,
        p: &Permutation,
        conj: Conj,
        alpha: DynScalar,
        beta: DynScalar,
    ) -> Result<()> {
        self.add_impl(c, a, p, conj, alpha, beta, true)
    }

    fn trace(
        &self,
        c: &mut Self::Tensor,
        a: &Self::Tensor,
        spec: &TraceSpec,
        conj: Conj,
        alpha: DynScalar,
        beta: DynScalar,
    ) -> Result<()> {
        check::trace(self, c, a, spec, alpha, beta)?;
        check_alias(("c", c), a, "a")?;
        let av = a.data().to_c64_vec();
        let sa = row_major_strides(a.dims());
        let qdims: Vec<usize> = spec.summed().iter().map(|g| a.dims()[g[0]]).collect();
        let al = alpha.to_c64();
        let rank = a.dims().len();
        update(c, beta, |i| {
            let mut sum = Complex64::new(0.0, 0.0);
            let mut j = vec![0; rank];
            for (m, g) in spec.kept().iter().enumerate() {
                for &x in g {
                    j[x] = i[m];
                }
            }
            for_each_index(&qdims, |t| {
                for (k, &tk) in t.iter().enumerate() {
                    for &x in &spec.summed()[k] {
                        j[x] = tk;
                    }
                }
                sum += opc(av[offset(&j, &sa)], conj);
            });
            al * sum
        })
    }

    fn add_to_diagonal(
        &self,
        a: &mut Self::Tensor,
        c: &Self::Tensor,
        spec: &TraceSpec,
        conj: Conj,
        alpha: DynScalar,
    ) -> Result<()> {
        check::add_to_diagonal(self, a, c, spec)?;
        check_alias(("a", a), c, "c")?;
        let cv = c.data().to_c64_vec();
        let sc = row_major_strides(c.dims());
        let al = alpha.to_c64();
        let one = DynScalar::one(a.dtype());
        update(a, one, |i| {
            let on_diagonal = spec
                .kept()
                .iter()
                .chain(spec.summed())
                .all(|g| g.iter().all(|&x| i[x] == i[g[0]]));
            if !on_diagonal {
                return Complex64::new(0.0, 0.0);
            }
            let ip: Vec<usize> = spec.kept().iter().map(|g| i[g[0]]).collect();
            al * opc(cv[offset(&ip, &sc)], conj)
        })
    }

    fn contract(
        &self,
        c: &mut Self::Tensor,
        a: &Self::Tensor,
        b: &Self::Tensor,
        spec: &ContractSpec,
        conj_a: Conj,
        conj_b: Conj,
        alpha: DynScalar,
        beta: DynScalar,
    ) -> Result<()> {
        check::contract(self, c, a, b, spec, alpha, beta)?;
        check_alias(("c", c), a, "a")?;
        check_alias(("c", c), b, "b")?;
        let (av, bv) = (a.data().to_c64_vec(), b.data().to_c64_vec());
        let (sa, sb) = (row_major_strides(a.dims()), row_major_strides(b.dims()));
        let kdims: Vec<usize> = spec.contr_a().iter().map(|&i| a.dims()[i]).collect();
        let perm = spec.perm_ab().as_slice().to_vec();
        let (nl, na) = (spec.num_batch(), spec.open_a().len());
        let al = alpha.to_c64();
        update(c, beta, |i| {
            let mut u = vec![0; perm.len()];
            for (m, &pm) in perm.iter().enumerate() {
                u[pm] = i[m];
            }
            let mut ja = vec![0; spec.rank_a()];
            let mut jb = vec![0; spec.rank_b()];
            for (x, (&ax, &bx)) in spec.batch_a().iter().zip(spec.batch_b()).enumerate() {
                ja[ax] = u[x];
                jb[bx] = u[x];
            }
            for (x, &ax) in spec.open_a().iter().enumerate() {
                ja[ax] = u[nl + x];
            }
            for (x, &bx) in spec.open_b().iter().enumerate() {
                jb[bx] = u[nl + na + x];
            }
            let mut sum = Complex64::new(0.0, 0.0);
            for_each_index(&kdims, |k| {
                for (y, &ky) in k.iter().enumerate() {
                    ja[spec.contr_a()[y]] = ky;
                    jb[spec.contr_b()[y]] = ky;
                }
                sum += opc(av[offset(&ja, &sa)], conj_a) * opc(bv[offset(&jb, &sb)], conj_b);
            });
            al * sum
        })
    }

    fn inner(&self, x: &Self::Tensor, y: &Self::Tensor) -> Result<DynScalar> {
        let dtype = check::inner(self, x, y)?;
        let s: Complex64 = x
            .data()
            .to_c64_vec()
            .iter()
            .zip(y.data().to_c64_vec())
            .map(|(a, b)| a.conj() * b)
            .sum();
        Ok(DynScalar::from_c64(s, dtype))
    }

    fn scale(&self, t: &mut Self::Tensor, s: DynScalar) -> Result<()> {
        s.cast(t.dtype(), "s")?;
        let z = s.to_c64();
        let strong_zero = s.is_zero();
        let v: Vec<Complex64> = t
            .data()
            .to_c64_vec()
            .into_iter()
            .map(|x| {
                if strong_zero {
                    Complex64::new(0.0, 0.0)
                } else {
                    z * x
                }
            })
            .collect();
        let dims = t.dims().to_vec();
        let dtype = t.dtype();
        *Arc::make_mut(t) = HostTensor::new(&dims, HostData::from_c64_projected(&v, dtype))?;
        Ok(())
    }

    fn scalar(&self, t: &Self::Tensor) -> Result<DynScalar> {
        check::scalar(self, t)?;
        t.data()
            .get(0)
            .ok_or_else(|| Error::invalid("tensor", "rank-0 tensor without an element"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(dims: &[usize], v: Vec<f64>) -> Arc<HostTensor> {
        Arc::new(HostTensor::from_vec(dims, v).unwrap())
    }

    #[test]
    fn matrix_product_transpose_and_trace() {
        let be = ReferenceBackend;
        let a = t(&[2, 2], vec![1.0, 2.0, 3.0, 4.0]);
        let b = t(&[2, 2], vec![5.0, 6.0, 7.0, 8.0]);
        let mut c = be.zeros(&[2, 2], DType::F64).unwrap();
        let spec = ContractSpec::from_labels("ij", "jk", "ik").unwrap();
        be.contract(
            &mut c,
            &a,
            &b,
            &spec,
            Conj::No,
            Conj::No,
            1.0.into(),
            0.0.into(),
        )
        .unwrap();
        assert_eq!(c.as_slice::<f64>().unwrap(), &[19.0, 22.0, 43.0, 50.0]);
        let mut at = be.zeros(&[2, 2], DType::F64).unwrap();
        let p = Permutation::new(&[1, 0]).unwrap();
        be.add(&mut at, &a, &p, Conj::No, 2.0.into(), 0.0.into())
            .unwrap();
        assert_eq!(at.as_slice::<f64>().unwrap(), &[2.0, 6.0, 4.0, 8.0]);
        let mut tr = be.zeros(&[], DType::F64).unwrap();
        let spec = TraceSpec::new(&[], &[0], &[1]).unwrap();
        be.trace(&mut tr, &a, &spec, Conj::No, 1.0.into(), 0.0.into())
            .unwrap();
        assert_eq!(be.scalar(&tr).unwrap(), DynScalar::F64(5.0));
        let mut diag = be.zeros(&[2, 2], DType::F64).unwrap();
        be.add_to_diagonal(&mut diag, &tr, &spec, Conj::No, 2.0.into())
            .unwrap();
        assert_eq!(diag.as_slice::<f64>().unwrap(), &[10.0, 0.0, 0.0, 10.0]);
    }

    #[test]
    fn strong_zero_and_aliasing() {
        let be = ReferenceBackend;
        let a = t(&[2], vec![1.0, 2.0]);
        let mut c = t(&[2], vec![f64::NAN, f64::NAN]);
        be.add(
            &mut c,
            &a,
            &Permutation::identity(1),
            Conj::No,
            1.0.into(),
            0.0.into(),
        )
        .unwrap();
        assert_eq!(c.as_slice::<f64>().unwrap(), &[1.0, 2.0]);
        let mut alias = a.clone();
        let err = be
            .add(
                &mut alias,
                &a,
                &Permutation::identity(1),
                Conj::No,
                1.0.into(),
                1.0.into(),
            )
            .unwrap_err();
        assert!(matches!(err, Error::Aliasing { .. }));
    }
}
