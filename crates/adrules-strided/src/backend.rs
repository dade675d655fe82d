//! [`Strided`]: the [`Backend`] implementation, dispatching on dtypes to the typed kernels.

use adrules_core::backend::check;
use adrules_core::{
    Backend, Conj, ContractSpec, DType, Dims, DynScalar, Error, HostTensor, Permutation, Result,
    TraceSpec,
};

use crate::dispatch::with_type;
use crate::kernels;
use crate::tensor::Tensor;

/// The embedded strided CPU backend: [`Tensor`]s of `f32`, `f64`, `Complex32` and
/// `Complex64`, updated in place by the kernels of [`kernels`](crate::kernels).
///
/// A unit struct: cloning is free. Parallel kernels run on the current rayon pool (the
/// global one, or the pool of an enclosing `ThreadPool::install`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Strided;

fn check_alias(output: &str, out: &Tensor, input: &str, other: &Tensor) -> Result<()> {
    if out.shares_storage(other) {
        Err(Error::Aliasing {
            output: output.into(),
            input: input.into(),
        })
    } else {
        Ok(())
    }
}

impl Backend for Strided {
    type Tensor = Tensor;

    fn name(&self) -> &'static str {
        "strided"
    }

    fn dtypes(&self) -> &'static [DType] {
        &DType::ALL
    }

    fn dims(&self, t: &Tensor) -> Dims {
        t.dims().iter().copied().collect()
    }

    fn dtype(&self, t: &Tensor) -> DType {
        t.dtype()
    }

    fn zeros(&self, dims: &[usize], dtype: DType) -> Result<Tensor> {
        Tensor::zeros(dims, dtype)
    }

    /// [`Tensor::empty`]: no zero-fill when the buffer is recycled.
    fn empty(&self, dims: &[usize], dtype: DType) -> Result<Tensor> {
        Tensor::empty(dims, dtype)
    }

    fn to_host(&self, t: &Tensor) -> Result<HostTensor> {
        t.to_host()
    }

    fn from_host(&self, h: HostTensor) -> Result<Tensor> {
        Ok(Tensor::from_host(h))
    }

    fn add(
        &self,
        c: &mut Tensor,
        a: &Tensor,
        p: &Permutation,
        conj: Conj,
        alpha: DynScalar,
        beta: DynScalar,
    ) -> Result<()> {
        let check::Coefficients { alpha, beta } = check::add(self, c, a, p, alpha, beta)?;
        check_alias("c", c, "a", a)?;
        with_type!(a.dtype(), TA => with_type!(c.dtype(), TC => {
            let av = a.view::<TA>()?;
            let mut cv = c.writable::<TC>(!beta.is_zero())?;
            kernels::add_impl(&mut cv, &av, p, conj, alpha.to::<TC>()?, beta.to::<TC>()?)
        }))
    }

    fn add_projected(
        &self,
        c: &mut Tensor,
        a: &Tensor,
        p: &Permutation,
        conj: Conj,
        alpha: DynScalar,
        beta: DynScalar,
    ) -> Result<()> {
        let exact = a.dtype().promotes_to(c.dtype()) && alpha.cast(c.dtype(), "alpha").is_ok();
        if exact {
            return self.add(c, a, p, conj, alpha, beta);
        }
        let beta = check::add_projected(self, c, a, p, beta)?;
        check_alias("c", c, "a", a)?;
        with_type!(a.dtype(), TA => with_type!(c.dtype(), TC => {
            let av = a.view::<TA>()?;
            let mut cv = c.writable::<TC>(!beta.is_zero())?;
            kernels::add_projected(&mut cv, &av, p, conj, alpha, beta.to::<TC>()?)
        }))
    }

    fn trace(
        &self,
        c: &mut Tensor,
        a: &Tensor,
        spec: &TraceSpec,
        conj: Conj,
        alpha: DynScalar,
        beta: DynScalar,
    ) -> Result<()> {
        let check::Coefficients { alpha, beta } = check::trace(self, c, a, spec, alpha, beta)?;
        check_alias("c", c, "a", a)?;
        with_type!(a.dtype(), TA => with_type!(c.dtype(), TC => {
            let av = a.view::<TA>()?;
            let mut cv = c.writable::<TC>(!beta.is_zero())?;
            kernels::trace_impl(&mut cv, &av, spec, conj, alpha.to::<TC>()?, beta.to::<TC>()?)
        }))
    }

    fn add_to_diagonal(
        &self,
        a: &mut Tensor,
        c: &Tensor,
        spec: &TraceSpec,
        conj: Conj,
        alpha: DynScalar,
    ) -> Result<()> {
        check::add_to_diagonal(self, a, c, spec)?;
        check_alias("a", a, "c", c)?;
        with_type!(c.dtype(), TC => with_type!(a.dtype(), TA => {
            let cv = c.view::<TC>()?;
            let mut av = a.writable::<TA>(true)?;
            kernels::add_to_diagonal(&mut av, &cv, spec, conj, alpha)
        }))
    }

    fn contract(
        &self,
        c: &mut Tensor,
        a: &Tensor,
        b: &Tensor,
        spec: &ContractSpec,
        conj_a: Conj,
        conj_b: Conj,
        alpha: DynScalar,
        beta: DynScalar,
    ) -> Result<()> {
        let check::Coefficients { alpha, beta } =
            check::contract(self, c, a, b, spec, alpha, beta)?;
        check_alias("c", c, "a", a)?;
        check_alias("c", c, "b", b)?;
        with_type!(a.dtype(), TA => with_type!(b.dtype(), TB => with_type!(c.dtype(), TC => {
            let (av, bv) = (a.view::<TA>()?, b.view::<TB>()?);
            let mut cv = c.writable::<TC>(!beta.is_zero())?;
            kernels::contract_impl(
                &mut cv,
                &av,
                &bv,
                spec,
                conj_a,
                conj_b,
                alpha.to::<TC>()?,
                beta.to::<TC>()?,
            )
        })))
    }

    fn inner(&self, x: &Tensor, y: &Tensor) -> Result<DynScalar> {
        let w = check::inner(self, x, y)?;
        with_type!(x.dtype(), TX => with_type!(y.dtype(), TY => with_type!(w, TW => {
            let s: TW = kernels::inner_impl(&x.view::<TX>()?, &y.view::<TY>()?)?;
            Ok(adrules_core::Scalar::to_dyn(s))
        })))
    }

    fn scale(&self, t: &mut Tensor, s: DynScalar) -> Result<()> {
        let s = s.cast(t.dtype(), "s")?;
        if s.is_one() {
            return Ok(());
        }
        with_type!(t.dtype(), T => {
            let mut v = t.writable::<T>(!s.is_zero())?;
            kernels::scale(&mut v, s.to::<T>()?);
            Ok(())
        })
    }

    fn scalar(&self, t: &Tensor) -> Result<DynScalar> {
        t.scalar()
    }

    /// One vectorized pass over the elements (no temporary).
    fn all_finite(&self, t: &Tensor) -> Result<bool> {
        with_type!(t.dtype(), T => Ok(kernels::all_finite_impl(&t.view::<T>()?)))
    }
}
