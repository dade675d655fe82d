//! The finite-output policy ([`adrules_core::finite`]) on a backend: `Backend::all_finite`
//! on finite, huge, NaN, infinite, empty and rank-0 tensors; a network whose value, cotangent
//! or tangent overflows from finite inputs returns [`Error::NonFinite`] naming that output;
//! a NaN given to a network propagates (no error); a pairwise pushforward that overflows
//! leaves the caller's C unchanged.

use adrules_core::network::{Network, NetworkPlan, Order};
use adrules_core::rules::{ContractOp, Tangents};
use adrules_core::{Backend, ContractSpec, DType, Error, HostData, HostTensor};

use super::Config;

/// The largest finite value of `dtype`'s real type.
fn max_of(dtype: DType) -> f64 {
    if dtype.real() == DType::F32 {
        f32::MAX as f64
    } else {
        f64::MAX
    }
}

fn filled<B: Backend>(be: &B, dims: &[usize], dtype: DType, values: &[f64]) -> B::Tensor {
    let n: usize = dims.iter().product();
    let data: Vec<f64> = (0..n).map(|i| values[i % values.len()]).collect();
    let h = HostTensor::new(dims, HostData::F64(data)).expect("valid shape");
    be.from_host(h.to_dtype_projected(dtype))
        .expect("the backend stores this dtype")
}

fn non_finite_arg<T>(r: adrules_core::Result<T>, what: &str) -> String {
    match r {
        Err(Error::NonFinite { arg, .. }) => arg,
        Err(e) => panic!("{what}: expected Error::NonFinite, got {e}"),
        Ok(_) => panic!("{what}: an overflow from finite inputs returned Ok"),
    }
}

/// The checks listed in the module documentation, for every dtype of `cfg`.
pub fn finite_output_policy<B: Backend>(be: &B, cfg: &Config) {
    let net = Network::einsum("ij,jk->ik").expect("valid network");
    let plan = NetworkPlan::new(&net, &[[2, 3], [3, 2]], &Order::Default).expect("valid plan");
    for &dtype in &cfg.dtypes {
        if !cfg.supports(&[dtype], &[2]) {
            continue;
        }
        let max = max_of(dtype);
        let what = |s: &str| format!("{s} ({dtype})");
        // all_finite
        let ok = |t: &B::Tensor| be.all_finite(t).expect("all_finite");
        assert!(
            ok(&filled(be, &[2, 3], dtype, &[max, -max, 1.0])),
            "{}",
            what("huge")
        );
        assert!(ok(&filled(be, &[0, 3], dtype, &[1.0])), "{}", what("empty"));
        assert!(ok(&filled(be, &[], dtype, &[2.0])), "{}", what("rank 0"));
        for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            let t = filled(be, &[2, 3], dtype, &[1.0, 2.0, 3.0, bad, 5.0, 6.0]);
            assert!(!ok(&t), "{}", what(&format!("all_finite with {bad}")));
        }
        // the value overflows: Σ_j A_ij·B_jk with every product at max
        let root = max.sqrt();
        let (a, b) = (
            filled(be, &[2, 3], dtype, &[root]),
            filled(be, &[3, 2], dtype, &[root]),
        );
        let arg = non_finite_arg(plan.execute(be, &[&a, &b]), &what("execute"));
        assert_eq!(arg, "output", "{}", what("execute"));
        let arg = non_finite_arg(plan.rrule(be, &[&a, &b], &[true, true]), &what("rrule"));
        assert_eq!(arg, "output", "{}", what("rrule"));
        // finite value, the cotangent of operand 0 overflows: ΔA = C̄·Bᴴ with C̄ at 3/4 of max, two terms
        let (a, b) = (
            filled(be, &[2, 3], dtype, &[1.0]),
            filled(be, &[3, 2], dtype, &[1.0]),
        );
        let c_bar = filled(be, &[2, 2], dtype, &[0.75 * max]);
        let (_, pb) = plan.rrule(be, &[&a, &b], &[true, false]).expect("finite");
        let arg = non_finite_arg(pb.pullback(&c_bar), &what("pullback"));
        assert_eq!(arg, "the cotangent of operand 0", "{}", what("pullback"));
        // a NaN given is propagated, not an error
        let nan = filled(be, &[2, 3], dtype, &[1.0, f64::NAN]);
        let c = plan
            .execute(be, &[&nan, &b])
            .expect("a NaN operand propagates");
        assert!(!ok(&c), "{}", what("NaN operand"));
        // the tangent overflows
        let da = filled(be, &[2, 3], dtype, &[max / 2.0]);
        let r = plan.frule(be, &[&a, &b], &[Some(&da), None]);
        let arg = non_finite_arg(r, &what("frule"));
        assert_eq!(arg, "the tangent of the output", "{}", what("frule"));
        let arg = non_finite_arg(
            plan.hvp(be, &[&a, &b], &c_bar, &[None, Some(&b)], &[true, false]),
            &what("hvp"),
        );
        assert!(arg.contains("operand 0"), "{}: {arg}", what("hvp"));
        // the pairwise pushforward: the error comes before the primal writes C
        let op = ContractOp::new(ContractSpec::from_labels("ij", "jk", "ik").expect("labels"));
        let mut c = filled(be, &[2, 2], dtype, &[7.0]);
        let before = be.to_host(&c).expect("host");
        let t = Tangents {
            a: Some(&da),
            ..Tangents::default()
        };
        let arg = non_finite_arg(op.frule(be, &mut c, &a, &b, t), &what("ContractOp::frule"));
        assert_eq!(arg, "c_dot", "{}", what("ContractOp::frule"));
        assert_eq!(
            be.to_host(&c).expect("host"),
            before,
            "{}",
            what("ContractOp::frule changed C on error")
        );
    }
}
