//! Conformance of scalar extraction from a rank-0 tensor ([`tensorscalar_rrule`],
//! [`tensorscalar_frule`]).

use adrules_core::rules::{tensorscalar_frule, tensorscalar_rrule};
use adrules_core::{Backend, DType, Error};

use super::Config;
use crate::Rng;

/// Scalar extraction for every configured dtype: the value, the pullback (a rank-0 tensor of
/// the tensor's dtype holding the cotangent projected onto it, exactly), the pushforward (the
/// tangent's value, exactly), and [`Error::RankMismatch`] for a tensor of rank 1.
///
/// # Panics
/// On the first mismatch.
pub fn tensorscalar_rules<B: Backend>(be: &B, cfg: &Config) {
    let mut rng = Rng::seed(4);
    for &dt in &cfg.dtypes {
        let h = rng.tensor(&[], dt);
        let t = be.from_host(h.clone()).unwrap();
        let (v, pb) = tensorscalar_rrule(be, &t).unwrap();
        assert_eq!(v, h.data().get(0).unwrap());
        let cbar = rng.scalar(DType::C64);
        let g = be.to_host(&pb.pullback(cbar).unwrap()).unwrap();
        assert_eq!(g.dtype(), dt);
        assert!(g.dims().is_empty());
        let want = cbar.project(dt);
        assert_eq!(
            g.data().get(0).unwrap(),
            want,
            "scalar pullback projects onto {dt}"
        );
        let dh = rng.tensor(&[], dt);
        let dt_dev = be.from_host(dh.clone()).unwrap();
        let (v2, dv) = tensorscalar_frule(be, &t, &dt_dev).unwrap();
        assert_eq!(v2, v);
        assert_eq!(dv, dh.data().get(0).unwrap());
        let not_scalar = be.from_host(rng.tensor(&[2], dt)).unwrap();
        assert!(matches!(
            tensorscalar_rrule(be, &not_scalar),
            Err(Error::RankMismatch { .. })
        ));
    }
}
