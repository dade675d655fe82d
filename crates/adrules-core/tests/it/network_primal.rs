//! Primal results of network plans against a naive summation over all labels.

use adrules_core::network::{Label, Network, NetworkPlan, Optimizer, Order};
use std::cell::RefCell;
use std::sync::Arc;

use crate::support::network::*;
use adrules_core::alloc::{Checkpoint, Lifetime};
use adrules_core::{
    Allocator, Backend, Complex64, Conj, DType, DynScalar, HeapAllocator, HostTensor,
};
use adrules_testing::ReferenceBackend;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Orders to try on `network`: the default, every optimizer, and a random label order.
fn orders(rng: &mut impl Rng, network: &Network, net: &RandomNetwork, ncon: bool) -> Vec<Order> {
    let mut contracted: Vec<Label> = (0..net.dims.len())
        .filter(|l| !net.output.contains(l))
        .map(|l| {
            if ncon {
                Label::Int(l as i64 + 1)
            } else {
                Label::Char((b'a' + l as u8) as char)
            }
        })
        .collect();
    contracted.shuffle(rng);
    assert_eq!(network.num_operands(), net.inputs.len());
    vec![
        Order::Default,
        Order::Optimize(Optimizer::Greedy),
        Order::Optimize(Optimizer::Exhaustive),
        Order::Optimize(Optimizer::TreeSa),
        Order::Labels(contracted),
    ]
}

#[test]
fn random_networks_match_naive_summation_in_both_notations_and_every_order() {
    let be = ReferenceBackend;
    let mut rng = ChaCha8Rng::seed_from_u64(0x5eed);
    let mut checked = 0;
    for case in 0..250 {
        let n = rng.random_range(1..=6);
        let net = RandomNetwork::generate(&mut rng, n, 8, 0.04);
        let dtypes: Vec<DType> = (0..n).map(|_| random_dtype(&mut rng)).collect();
        let dims = net.operand_dims();
        let host: Vec<HostTensor> = dims
            .iter()
            .zip(&dtypes)
            .map(|(d, &t)| random_tensor(&mut rng, d, t))
            .collect();
        let (expected, scale) = net.naive(&host);
        let out_dtype = dtypes.iter().fold(DType::F32, |a, &d| a.join(d));
        let unit = dtypes.iter().map(|&d| eps(d)).fold(0.0, f64::max);
        let tol = 16.0 * (n as f64 + 1.0) * unit * scale.max(1.0);
        let tensors = arcs(&host);
        let refs: Vec<_> = tensors.iter().collect();
        let networks = [
            (Network::einsum(&net.einsum()).unwrap(), false),
            (Network::ncon(&net.ncon(), None).unwrap(), true),
        ];
        for (network, ncon) in networks {
            let network = network.with_conj(&net.conj).unwrap();
            for order in orders(&mut rng, &network, &net, ncon) {
                let plan = NetworkPlan::new(&network, &dims, &order).unwrap();
                let c = plan.execute(&be, &refs).unwrap();
                assert_eq!(be.dtype(&c), out_dtype);
                let err = max_abs_diff(&c, &net.output_dims(), &expected);
                assert!(
                    err <= tol,
                    "case {case}: {} conj {:?} dtypes {dtypes:?} order {order:?}: error {err:e} > {tol:e}",
                    net.einsum(),
                    net.conj
                );
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 250 * 2 * 5);
}

fn check_einsum(s: &str, dims: &[&[usize]], dtype: DType, conj: &[Conj]) -> NetworkPlan {
    let be = ReferenceBackend;
    let mut rng = ChaCha8Rng::seed_from_u64(s.len() as u64);
    let network = Network::einsum(s).unwrap().with_conj(conj).unwrap();
    let plan = NetworkPlan::new(&network, dims, &Order::Default).unwrap();
    let host: Vec<HostTensor> = dims
        .iter()
        .map(|d| random_tensor(&mut rng, d, dtype))
        .collect();
    // the same network as a RandomNetwork, for the naive reference
    let letters: Vec<char> = s.chars().filter(char::is_ascii_alphabetic).collect();
    let mut ids: Vec<char> = Vec::new();
    for c in letters {
        if !ids.contains(&c) {
            ids.push(c);
        }
    }
    let id = |c: char| ids.iter().position(|&x| x == c).unwrap();
    let (ins, out) = s.split_once("->").unwrap();
    let inputs: Vec<Vec<usize>> = ins
        .split(',')
        .map(|w| w.chars().map(id).collect())
        .collect();
    let mut label_dims = vec![0; ids.len()];
    for (list, d) in inputs.iter().zip(dims) {
        for (&l, &x) in list.iter().zip(d.iter()) {
            label_dims[l] = x;
        }
    }
    let net = RandomNetwork {
        inputs,
        output: out.chars().map(id).collect(),
        dims: label_dims,
        conj: conj.to_vec(),
    };
    let (expected, scale) = net.naive(&host);
    let tensors = arcs(&host);
    let refs: Vec<_> = tensors.iter().collect();
    let c = plan.execute(&be, &refs).unwrap();
    let err = max_abs_diff(&c, &net.output_dims(), &expected);
    assert!(
        err <= 64.0 * eps(dtype) * scale.max(1.0),
        "{s}: error {err:e}"
    );
    plan
}

/// The primitive of every step of `p`, in order.
fn kinds(p: &NetworkPlan) -> Vec<&'static str> {
    p.steps().iter().map(|s| s.primitive().name()).collect()
}

#[test]
fn traces_outer_products_disconnected_and_scalar_results() {
    let y = Conj::Yes;
    let no = Conj::No;
    // self-trace to a scalar, and a partial trace with a permuted output
    let p = check_einsum("ii->", &[&[3, 3]], DType::C64, &[y]);
    assert_eq!(kinds(&p), ["trace"]);
    let p = check_einsum("ijik->kj", &[&[2, 3, 2, 4]], DType::C64, &[y]);
    assert_eq!(kinds(&p), ["trace"]);
    // a single operand permuted: one add
    let p = check_einsum("abc->cab", &[&[2, 3, 4]], DType::C32, &[y]);
    assert_eq!(kinds(&p), ["add"]);
    // traces first, then the contraction
    let p = check_einsum(
        "iijk,kllm->jm",
        &[&[2, 2, 3, 4], &[4, 3, 3, 5]],
        DType::C64,
        &[y, no],
    );
    assert_eq!(kinds(&p), ["trace", "trace", "contract"]);
    // outer product, disconnected network, scalar operands and scalar results
    check_einsum("ab,cd->dbca", &[&[2, 3], &[4, 2]], DType::F64, &[no, no]);
    check_einsum(
        "ij,jk,lm->mkil",
        &[&[2, 3], &[3, 4], &[2, 5]],
        DType::C64,
        &[y, no, y],
    );
    check_einsum(",ab,->ba", &[&[], &[2, 3], &[]], DType::C64, &[y, y, no]);
    check_einsum("ij,ij->", &[&[3, 4], &[3, 4]], DType::C64, &[y, no]);
    check_einsum(
        "ij,jk,ki->",
        &[&[2, 3], &[3, 4], &[4, 2]],
        DType::F32,
        &[no, no, no],
    );
    check_einsum("ii,jj->", &[&[3, 3], &[2, 2]], DType::C32, &[no, y]);
    // zero-size dimensions: a zero contracted dimension gives zeros, a zero open one is empty
    check_einsum("ij,jk->ik", &[&[2, 0], &[0, 3]], DType::C64, &[y, no]);
    check_einsum(
        "ij,jk,kl->li",
        &[&[2, 3], &[3, 0], &[0, 4]],
        DType::F64,
        &[no, no, no],
    );
    check_einsum("ij,jk->ik", &[&[0, 3], &[3, 2]], DType::F32, &[no, no]);
}

#[test]
fn ncon_and_einsum_agree_and_the_output_order_is_respected() {
    let be = ReferenceBackend;
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let dims: [&[usize]; 3] = [&[2, 3, 4], &[3, 5, 6], &[4, 5, 7]];
    let host: Vec<HostTensor> = dims
        .iter()
        .map(|d| random_tensor(&mut rng, d, DType::C64))
        .collect();
    let tensors = arcs(&host);
    let refs: Vec<_> = tensors.iter().collect();
    let conj = [Conj::Yes, Conj::No, Conj::Yes];
    let e = Network::einsum("abc,bde,cdf->aef")
        .unwrap()
        .with_conj(&conj)
        .unwrap();
    let n = Network::ncon(&[vec![-1, 1, 2], vec![1, 3, -2], vec![2, 3, -3]], None)
        .unwrap()
        .with_conj(&conj)
        .unwrap();
    let n_out = Network::ncon(
        &[vec![-7, 1, 2], vec![1, 3, -5], vec![2, 3, -6]],
        Some(&[-6, -7, -5]),
    )
    .unwrap()
    .with_conj(&conj)
    .unwrap();
    let ce = NetworkPlan::new(&e, &dims, &Order::Default)
        .unwrap()
        .execute(&be, &refs)
        .unwrap();
    let cn = NetworkPlan::new(&n, &dims, &Order::Default)
        .unwrap()
        .execute(&be, &refs)
        .unwrap();
    let co = NetworkPlan::new(&n_out, &dims, &Order::Default)
        .unwrap()
        .execute(&be, &refs)
        .unwrap();
    assert_eq!(ce.dims(), &[2, 6, 7]);
    assert_eq!(co.dims(), &[7, 2, 6]);
    let (ve, vn, vo) = (
        ce.data().to_c64_vec(),
        cn.data().to_c64_vec(),
        co.data().to_c64_vec(),
    );
    for a in 0..2 {
        for e_ in 0..6 {
            for f in 0..7 {
                let x = ve[(a * 6 + e_) * 7 + f];
                assert!((x - vn[(a * 6 + e_) * 7 + f]).norm() < 1e-13);
                assert!((x - vo[(f * 2 + a) * 6 + e_]).norm() < 1e-13);
            }
        }
    }
}

#[test]
fn execute_into_is_blas_style_with_a_strong_zero() {
    let be = ReferenceBackend;
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let dims: [&[usize]; 3] = [&[2, 3], &[3, 4], &[4, 2]];
    let host: Vec<HostTensor> = dims
        .iter()
        .map(|d| random_tensor(&mut rng, d, DType::C64))
        .collect();
    let tensors = arcs(&host);
    let refs: Vec<_> = tensors.iter().collect();
    let plan = NetworkPlan::new(
        &Network::einsum("ij,jk,kl->il").unwrap(),
        &dims,
        &Order::Default,
    )
    .unwrap();
    let net = plan.execute(&be, &refs).unwrap();
    let c0 = random_tensor(&mut rng, &[2, 2], DType::C64);
    let mut c = Arc::new(c0.clone());
    let (alpha, beta) = (Complex64::new(0.5, -2.0), Complex64::new(-1.0, 0.25));
    plan.execute_into(
        &be,
        &HeapAllocator,
        &mut c,
        &refs,
        alpha.into(),
        beta.into(),
    )
    .unwrap();
    for ((x, c0), n) in c
        .data()
        .to_c64_vec()
        .iter()
        .zip(c0.data().to_c64_vec())
        .zip(net.data().to_c64_vec())
    {
        assert!((x - (beta * c0 + alpha * n)).norm() < 1e-13);
    }
    // β = 0 is a strong zero: NaN in C does not leak
    let mut nan = Arc::new(
        HostTensor::new(
            &[2, 2],
            adrules_core::HostData::C64(vec![Complex64::new(f64::NAN, 0.0); 4]),
        )
        .unwrap(),
    );
    plan.execute_into(
        &be,
        &HeapAllocator,
        &mut nan,
        &refs,
        DynScalar::F64(1.0),
        DynScalar::F64(0.0),
    )
    .unwrap();
    assert_eq!(nan.data(), net.data());
    // Complex operands into a real C: the error names the operand, and C is untouched.
    let real = random_tensor(&mut rng, &[2, 2], DType::F64);
    let mut c = Arc::new(real.clone());
    let e = plan
        .execute_into(
            &be,
            &HeapAllocator,
            &mut c,
            &refs,
            DynScalar::F64(1.0),
            DynScalar::F64(1.0),
        )
        .unwrap_err();
    assert!(
        matches!(e, adrules_core::Error::DTypeMismatch { ref arg, actual: DType::C64, .. } if arg == "operand 0"),
        "{e}"
    );
    assert_eq!(*c, real);
}

#[test]
fn exhaustive_order_is_never_costlier_than_the_ncon_order() {
    // both plans do the same partial traces, so the difference is in the contractions
    let mut rng = ChaCha8Rng::seed_from_u64(99);
    for _ in 0..100 {
        let n = rng.random_range(3..=6);
        let net = RandomNetwork::generate(&mut rng, n, 9, 0.0);
        let dims = net.operand_dims();
        let network = Network::ncon(&net.ncon(), None).unwrap();
        let ncon = NetworkPlan::new(&network, &dims, &Order::Default).unwrap();
        let best =
            NetworkPlan::new(&network, &dims, &Order::Optimize(Optimizer::Exhaustive)).unwrap();
        assert!(
            best.cost() <= ncon.cost() * (1.0 + 1e-12),
            "{}: exhaustive {} > ncon {}",
            net.einsum(),
            best.cost(),
            ncon.cost()
        );
    }
}

/// Records every call, delegating to the heap.
#[derive(Default)]
struct Recording {
    log: RefCell<Vec<String>>,
}

impl Allocator<ReferenceBackend> for Recording {
    fn allocate(
        &self,
        be: &ReferenceBackend,
        dims: &[usize],
        dtype: DType,
        lifetime: Lifetime,
    ) -> adrules_core::Result<Arc<HostTensor>> {
        self.log
            .borrow_mut()
            .push(format!("alloc {dims:?} {dtype} {lifetime:?}"));
        HeapAllocator.allocate(be, dims, dtype, lifetime)
    }
    fn free(&self, t: Arc<HostTensor>) {
        self.log.borrow_mut().push(format!("free {:?}", t.dims()));
    }
    fn checkpoint(&self) -> Checkpoint {
        Checkpoint::new(0)
    }
    fn reset(&self, _: Checkpoint) -> adrules_core::Result<()> {
        Ok(())
    }
}

#[test]
fn intermediates_are_temporaries_freed_right_after_their_consumer() {
    let be = ReferenceBackend;
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let dims: [&[usize]; 4] = [&[2, 3], &[3, 4], &[4, 5], &[5, 6]];
    let host: Vec<HostTensor> = dims
        .iter()
        .map(|d| random_tensor(&mut rng, d, DType::F64))
        .collect();
    let tensors = arcs(&host);
    let refs: Vec<_> = tensors.iter().collect();
    let network = Network::ncon(&[[-1, 1], [1, 2], [2, 3], [3, -2]], None).unwrap();
    let plan = NetworkPlan::new(&network, &dims, &Order::Default).unwrap();
    let alloc = Recording::default();
    let c = plan.execute_with(&be, &alloc, &refs).unwrap();
    assert_eq!(c.dims(), &[2, 6]);
    assert_eq!(
        alloc.log.into_inner(),
        [
            "alloc [2, 6] f64 Persistent",
            "alloc [2, 4] f64 Temporary",
            "alloc [2, 5] f64 Temporary",
            "free [2, 4]",
            "free [2, 5]",
        ]
    );
}
