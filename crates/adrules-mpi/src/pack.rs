//! Tensors to one `f64` buffer and back, for the reductions (a complex element is two
//! `f64`s, real then imaginary; `f32` data is widened, so partial sums add in `f64` and are
//! rounded once).

use adrules_core::{Backend, Complex32, Complex64, DType, HostData, HostTensor, Result};

/// Shape and dtype of each packed tensor, in order.
pub(crate) type Layout = Vec<(Vec<usize>, DType)>;

/// Appends every tensor's elements to one buffer (row-major, as [`HostTensor`]).
pub(crate) fn pack<B: Backend>(be: &B, tensors: &[&B::Tensor]) -> Result<(Vec<f64>, Layout)> {
    let mut buf = Vec::new();
    let mut layout = Vec::with_capacity(tensors.len());
    for t in tensors {
        let h = be.to_host(t)?;
        layout.push((h.dims().to_vec(), h.dtype()));
        match h.data() {
            HostData::F32(v) => buf.extend(v.iter().map(|&x| f64::from(x))),
            HostData::F64(v) => buf.extend_from_slice(v),
            HostData::C32(v) => {
                buf.extend(v.iter().flat_map(|z| [f64::from(z.re), f64::from(z.im)]))
            }
            HostData::C64(v) => buf.extend(v.iter().flat_map(|z| [z.re, z.im])),
        }
    }
    Ok((buf, layout))
}

/// `f64`s per element of `dtype`.
fn width(dtype: DType) -> usize {
    if dtype.is_complex() { 2 } else { 1 }
}

/// The number of `f64`s a layout packs into.
pub(crate) fn packed_len(layout: &Layout) -> usize {
    (layout.iter())
        .map(|(d, t)| d.iter().product::<usize>() * width(*t))
        .sum()
}

/// The tensors of `layout` back from `buf` (as [`pack`] wrote them).
pub(crate) fn unpack<B: Backend>(be: &B, buf: &[f64], layout: &Layout) -> Result<Vec<B::Tensor>> {
    let mut out = Vec::with_capacity(layout.len());
    let mut at = 0;
    for (dims, dtype) in layout {
        let n: usize = dims.iter().product();
        let w = &buf[at..at + n * width(*dtype)];
        at += n * width(*dtype);
        let data = match dtype {
            DType::F32 => HostData::F32(w.iter().map(|&x| x as f32).collect()),
            DType::F64 => HostData::F64(w.to_vec()),
            DType::C32 => HostData::C32(
                w.chunks_exact(2)
                    .map(|p| Complex32::new(p[0] as f32, p[1] as f32))
                    .collect(),
            ),
            DType::C64 => HostData::C64(
                w.chunks_exact(2)
                    .map(|p| Complex64::new(p[0], p[1]))
                    .collect(),
            ),
        };
        out.push(be.from_host(HostTensor::new(dims, data)?)?);
    }
    Ok(out)
}
