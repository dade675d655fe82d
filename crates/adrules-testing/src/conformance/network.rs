//! Conformance of whole networks ([`NetworkPlan`]): random small Einstein-string networks
//! through [`NetworkPlan::execute`], [`NetworkPlan::frule`] and [`NetworkPlan::rrule`] on the
//! backend, and the multi_dot oracle as one network.

use adrules_core::network::{Network, NetworkPlan, Order};
use adrules_core::{Backend, Complex64, Conj, DType, Error, HostData, HostTensor, Result};

use super::Config;
use super::case::{random_like, rel_err, report, tol, zero_like};
use super::contract::multi_dot_cases;
use crate::reference::{for_each_index, row_major_strides};
use crate::{FiniteDifference, Rng, Value, adjoint_mismatch};

mod hvp;
pub use hvp::{multi_dot_hvp, network_hvp};

/// A random network: label ids per operand and in the output, one dimension per label.
#[derive(Clone, Debug)]
struct RandomNetwork {
    operands: Vec<Vec<usize>>,
    output: Vec<usize>,
    label_dims: Vec<usize>,
    conj: Vec<Conj>,
}

fn letter(l: usize) -> char {
    char::from(b'a' + u8::try_from(l).expect("fewer than 26 labels"))
}

impl RandomNetwork {
    /// 2 to 4 operands joined by a random spanning tree of contracted labels (and sometimes
    /// one more edge, closing a loop), one partial trace (a label twice in one operand),
    /// sometimes a batch label, a hyperedge (three operands), a diagonal kept in the output or
    /// a sum over a single axis, 0 to 3 open labels in random order; labels in each operand
    /// shuffled; with `complex`, random conjugation flags (at least one set).
    fn draw(rng: &mut Rng, complex: bool) -> RandomNetwork {
        let n = 2 + rng.below(3);
        let mut operands: Vec<Vec<usize>> = vec![Vec::new(); n];
        let mut label_dims: Vec<usize> = Vec::new();
        let mut new_label = |rng: &mut Rng, smallest: usize| {
            label_dims.push(smallest + rng.below(4 - smallest));
            label_dims.len() - 1
        };
        for k in 1..n {
            let j = rng.below(k);
            let l = new_label(rng, 2);
            operands[j].push(l);
            operands[k].push(l);
        }
        if n >= 3 && rng.below(2) == 0 {
            let i = rng.below(n);
            let j = (i + 1 + rng.below(n - 1)) % n;
            let l = new_label(rng, 2);
            operands[i].push(l);
            operands[j].push(l);
        }
        let t = rng.below(n);
        let l = new_label(rng, 2);
        operands[t].extend([l, l]);
        let mut output = Vec::new();
        // the general grammar: a batch label (in two or more operands and the output), a
        // hyperedge (in three operands, summed), a diagonal kept in the output, a sum over a
        // single axis
        if rng.below(2) == 0 {
            let l = new_label(rng, 1);
            let first = rng.below(n);
            operands[first].push(l);
            operands[(first + 1 + rng.below(n - 1)) % n].push(l);
            output.push(l);
        }
        if n >= 3 && rng.below(2) == 0 {
            let l = new_label(rng, 2);
            for ls in operands.iter_mut().take(3) {
                ls.push(l);
            }
        }
        match rng.below(3) {
            0 => {
                let l = new_label(rng, 2);
                operands[rng.below(n)].extend([l, l]);
                output.push(l);
            }
            1 => {
                let l = new_label(rng, 2);
                operands[rng.below(n)].push(l);
            }
            _ => {}
        }
        for _ in 0..rng.below(4) {
            let k = rng.below(n);
            let l = new_label(rng, 1);
            operands[k].push(l);
            output.push(l);
        }
        for labels in &mut operands {
            let p = rng.permutation(labels.len());
            *labels = p.iter().map(|&i| labels[i]).collect();
        }
        let p = rng.permutation(output.len());
        let output = p.iter().map(|&i| output[i]).collect();
        let mut conj: Vec<Conj> = (0..n)
            .map(|_| {
                if complex && rng.below(2) == 0 {
                    Conj::Yes
                } else {
                    Conj::No
                }
            })
            .collect();
        if complex && !conj.contains(&Conj::Yes) {
            conj[rng.below(n)] = Conj::Yes;
        }
        RandomNetwork {
            operands,
            output,
            label_dims,
            conj,
        }
    }

    fn subscripts(&self) -> String {
        let word = |ls: &[usize]| ls.iter().map(|&l| letter(l)).collect::<String>();
        let inputs: Vec<String> = self.operands.iter().map(|ls| word(ls)).collect();
        format!("{}->{}", inputs.join(","), word(&self.output))
    }

    fn dims(&self) -> Vec<Vec<usize>> {
        self.operands
            .iter()
            .map(|ls| ls.iter().map(|&l| self.label_dims[l]).collect())
            .collect()
    }

    /// The plan in the default order, when every operand, intermediate and the output have
    /// rank at most `max_rank`.
    fn plan(&self, max_rank: usize) -> Result<Option<NetworkPlan>> {
        let net = Network::einsum(&self.subscripts())?.with_conj(&self.conj)?;
        let plan = NetworkPlan::new(&net, &self.dims(), &Order::Default)?;
        let fits = self.operands.iter().all(|ls| ls.len() <= max_rank)
            && (0..plan.steps().len())
                .all(|s| plan.step_dims(s).is_some_and(|d| d.len() <= max_rank));
        Ok(fits.then_some(plan))
    }

    /// The network evaluated naively on the host: the sum over every assignment of every
    /// label of the product of the (conjugated) operand elements, in `Complex64`, projected
    /// onto the joined dtype of the operands.
    fn naive(&self, tensors: &[HostTensor]) -> Result<HostTensor> {
        let data: Vec<Vec<Complex64>> = tensors.iter().map(|t| t.data().to_c64_vec()).collect();
        let strides: Vec<Vec<usize>> = self.dims().iter().map(|d| row_major_strides(d)).collect();
        let out_dims: Vec<usize> = self.output.iter().map(|&l| self.label_dims[l]).collect();
        let out_strides = row_major_strides(&out_dims);
        let mut acc = vec![Complex64::new(0.0, 0.0); out_dims.iter().product()];
        for_each_index(&self.label_dims, |idx| {
            let mut p = Complex64::new(1.0, 0.0);
            for (k, labels) in self.operands.iter().enumerate() {
                let at: usize = labels
                    .iter()
                    .zip(&strides[k])
                    .map(|(&l, s)| idx[l] * s)
                    .sum();
                let v = data[k][at];
                p *= if self.conj[k] == Conj::Yes {
                    v.conj()
                } else {
                    v
                };
            }
            let at: usize = self
                .output
                .iter()
                .zip(&out_strides)
                .map(|(&l, s)| idx[l] * s)
                .sum();
            acc[at] += p;
        });
        let dtype = tensors
            .iter()
            .map(HostTensor::dtype)
            .reduce(DType::join)
            .ok_or_else(|| Error::invalid("tensors", "no operand"))?;
        HostTensor::new(&out_dims, HostData::from_c64_projected(&acc, dtype))
    }
}

/// One random network checked on the backend; `Err` describes the first failure.
fn check_network<B: Backend>(
    be: &B,
    rng: &mut Rng,
    net: &RandomNetwork,
    plan: &NetworkPlan,
    dtypes: &[DType],
    active: &[bool],
) -> std::result::Result<(), String> {
    let name = format!(
        "network {} conj {:?} dtypes {dtypes:?} active {active:?}",
        net.subscripts(),
        net.conj
    );
    let err = |e: Error| format!("{name}: {e}");
    let tolerance = tol(dtypes);
    let dims = net.dims();
    let hosts: Vec<HostTensor> = dims
        .iter()
        .zip(dtypes)
        .map(|(d, &t)| rng.tensor(d, t))
        .collect();
    let x: Vec<Value> = hosts.iter().cloned().map(Value::Tensor).collect();
    let dx: Vec<Value> = x
        .iter()
        .zip(active)
        .map(|(v, &on)| {
            if on {
                random_like(rng, v)
            } else {
                zero_like(v)
            }
        })
        .collect();
    let dev: Vec<B::Tensor> = hosts
        .iter()
        .map(|h| be.from_host(h.clone()))
        .collect::<Result<_>>()
        .map_err(err)?;
    let refs: Vec<&B::Tensor> = dev.iter().collect();
    let dx_dev: Vec<Option<B::Tensor>> = dx
        .iter()
        .zip(active)
        .map(|(d, &on)| {
            on.then(|| be.from_host(d.tensor("direction")?.clone()))
                .transpose()
        })
        .collect::<Result<_>>()
        .map_err(err)?;
    let tangents: Vec<Option<&B::Tensor>> = dx_dev.iter().map(Option::as_ref).collect();

    // Primal against the naive evaluation.
    let want = Value::Tensor(net.naive(&hosts).map_err(err)?);
    let got = Value::Tensor(
        be.to_host(&plan.execute(be, &refs).map_err(err)?)
            .map_err(err)?,
    );
    if got.dtype() != want.dtype() {
        return Err(format!(
            "{name}: result has dtype {} instead of {}",
            got.dtype(),
            want.dtype()
        ));
    }
    let r = rel_err(&got, &want);
    if r > tolerance {
        return Err(format!(
            "{name}: primal differs from the naive sum by {r:e}"
        ));
    }

    // Rules on the backend.
    let (c_f, dc) = plan.frule(be, &refs, &tangents).map_err(err)?;
    let (c_r, pullback) = plan.rrule(be, &refs, active).map_err(err)?;
    for (label, c) in [("frule", &c_f), ("rrule", &c_r)] {
        let v = Value::Tensor(be.to_host(c).map_err(err)?);
        if rel_err(&v, &got) > tolerance {
            return Err(format!("{name}: {label} primal differs from execute"));
        }
    }
    let cbar_h = match &got {
        Value::Tensor(t) => rng.tensor(t.dims(), t.dtype()),
        Value::Scalar(_) => unreachable!("a network result is a tensor"),
    };
    let cbar_v = Value::Tensor(cbar_h.clone());
    let cbar = be.from_host(cbar_h).map_err(err)?;
    let cot = pullback.pullback(&cbar).map_err(err)?;
    if cot.len() != hosts.len() {
        return Err(format!(
            "{name}: {} cotangents for {} operands",
            cot.len(),
            hosts.len()
        ));
    }
    let mut xbar: Vec<Option<Value>> = Vec::with_capacity(cot.len());
    for (k, (g, &on)) in cot.iter().zip(active).enumerate() {
        if g.is_some() != on {
            return Err(format!(
                "{name}: operand {k} active = {on} but cotangent present = {}",
                g.is_some()
            ));
        }
        let g = g.as_ref().map(|g| be.to_host(g).map_err(err)).transpose()?;
        if let Some(g) = &g
            && (g.dims() != hosts[k].dims() || g.dtype() != hosts[k].dtype())
        {
            return Err(format!(
                "{name}: cotangent {k} is {:?} {} but its operand {:?} {}",
                g.dims(),
                g.dtype(),
                hosts[k].dims(),
                hosts[k].dtype()
            ));
        }
        xbar.push(g.map(Value::Tensor));
    }
    for (k, (d, h)) in dev.iter().zip(&hosts).enumerate() {
        if be.to_host(d).map_err(err)? != *h {
            return Err(format!("{name}: operand {k} was modified"));
        }
    }

    // Pushforward against finite differences of the naive evaluation.
    let fd = FiniteDifference::default();
    let f = |v: &[Value]| -> Result<Value> {
        let t: Vec<HostTensor> = v
            .iter()
            .map(|v| v.tensor("x").cloned())
            .collect::<Result<_>>()?;
        net.naive(&t).map(Value::Tensor)
    };
    let dc_v = Value::Tensor(be.to_host(&dc).map_err(err)?);
    let fd_all = fd.jvp(f, &x, &dx).map_err(err)?;
    let r = rel_err(&dc_v, &fd_all);
    if r > tolerance {
        return Err(format!(
            "{name}: pushforward differs from finite differences by {r:e}"
        ));
    }
    // Each cotangent against finite differences along its own direction.
    for (k, xb) in xbar.iter().enumerate() {
        let Some(xb) = xb else { continue };
        let d: Vec<Value> = dx
            .iter()
            .enumerate()
            .map(|(j, dj)| if j == k { dj.clone() } else { zero_like(dj) })
            .collect();
        let fd_k = fd.jvp(f, &x, &d).map_err(err)?;
        let lhs = cbar_v.inner(&fd_k).map_err(err)?.re;
        let rhs = xb.inner(&dx[k]).map_err(err)?.re;
        let scale = cbar_v.norm() * (fd_k.norm() + fd_all.norm()) + xb.norm() * dx[k].norm();
        if (lhs - rhs).abs() > tolerance * scale.max(1e-300) {
            return Err(format!(
                "{name}: cotangent of operand {k} fails the finite-difference check: {lhs} vs {rhs}"
            ));
        }
    }
    // Pullback against pushforward.
    let m = adjoint_mismatch(&cbar_v, &dc_v, &xbar, &dx).map_err(err)?;
    if m > tolerance {
        return Err(format!("{name}: adjoint test mismatch {m:e}"));
    }
    Ok(())
}

/// Random small networks, six per configured dtype (three more with mixed f64/c64 operands
/// when both are configured): 2 to 4 operands, a partial trace, a loop in some, batch labels,
/// hyperedges, diagonals and single-axis sums in some, 0 to 3 open labels, conjugation flags on complex dtypes, every tensor (intermediates included) of rank
/// at most `max_rank`, a random set of active operands. Each is checked through
/// [`NetworkPlan::execute`], [`NetworkPlan::frule`] and [`NetworkPlan::rrule`] on the backend:
/// the primal (also the primal the rules leave) against a naive sum over every label
/// assignment; the pushforward against central finite differences of that sum; every
/// cotangent against finite differences along its own direction; the pullback against the
/// pushforward (adjoint test); no cotangent for inactive operands, cotangents of their
/// operand's shape and dtype; the operands untouched.
///
/// # Panics
/// With the failing networks, or when no dtype is configured or no network fits `max_rank`.
pub fn network_rules<B: Backend>(be: &B, cfg: &Config) {
    let runs = RandomRuns {
        seed: 9,
        per_dtype: 6,
        mixed: 3,
        all_active_every: 3,
    };
    runs.run(cfg, |rng, net, plan, dtypes, active| {
        check_network(be, rng, net, plan, dtypes, active)
    });
}

/// How a check draws its random networks: `per_dtype` per configured dtype, `mixed` more with
/// mixed f64/c64 operands when both are configured, every operand active in every
/// `all_active_every`-th run (a random nonempty subset otherwise).
struct RandomRuns {
    seed: u64,
    per_dtype: usize,
    mixed: usize,
    all_active_every: usize,
}

impl RandomRuns {
    /// Draws the networks that fit `cfg.max_rank` (up to 100 tries each), runs `check` on
    /// each with its operand dtypes and active set, and reports the failures.
    ///
    /// # Panics
    /// With the failing networks, or when none ran.
    fn run(
        &self,
        cfg: &Config,
        mut check: impl FnMut(
            &mut Rng,
            &RandomNetwork,
            &NetworkPlan,
            &[DType],
            &[bool],
        ) -> std::result::Result<(), String>,
    ) {
        let mut rng = Rng::seed(self.seed);
        let mut runs: Vec<(DType, bool)> = Vec::new();
        for &dt in &cfg.dtypes {
            runs.extend(std::iter::repeat_n((dt, false), self.per_dtype));
        }
        if cfg.supports(&[DType::F64, DType::C64], &[]) {
            runs.extend(std::iter::repeat_n((DType::C64, true), self.mixed));
        }
        let (mut ran, mut failures) = (0, Vec::new());
        for (i, (dt, mixed)) in runs.into_iter().enumerate() {
            let drawn = (0..100).find_map(|_| {
                let net = RandomNetwork::draw(&mut rng, dt.is_complex());
                match net.plan(cfg.max_rank) {
                    Ok(Some(plan)) => Some(Ok((net, plan))),
                    Ok(None) => None,
                    Err(e) => Some(Err(e)),
                }
            });
            let (net, plan) = match drawn {
                Some(Ok(np)) => np,
                Some(Err(e)) => {
                    failures.push(format!("planning a random network: {e}"));
                    continue;
                }
                None => continue,
            };
            let n = net.operands.len();
            let dtypes: Vec<DType> = (0..n)
                .map(|_| {
                    if mixed && rng.below(2) == 0 {
                        dt.real()
                    } else {
                        dt
                    }
                })
                .collect();
            let mut active: Vec<bool> = (0..n)
                .map(|_| i % self.all_active_every == 0 || rng.below(3) > 0)
                .collect();
            if !active.contains(&true) {
                active[rng.below(n)] = true;
            }
            ran += 1;
            if let Err(e) = check(&mut rng, &net, &plan, &dtypes, &active) {
                failures.push(e);
            }
        }
        report(ran, failures);
    }
}

/// Every case of the oracle `multi_dot.jsonl` as one network `"ab,bc,…->a…"` planned in the
/// default (optimized) order: the JVP through [`NetworkPlan::frule`] and the VJP through
/// [`NetworkPlan::rrule`] against PyTorch's references, within the tolerances of
/// [`multi_dot_oracle`](super::contract::multi_dot_oracle).
///
/// # Panics
/// On the first mismatch; when the oracle file is missing or no case has a configured dtype.
pub fn multi_dot_network<B: Backend>(be: &B, cfg: &Config) {
    for case in &multi_dot_cases(cfg) {
        let inputs = case.inputs_in_order();
        let k = inputs.len();
        let words: Vec<String> = (0..k)
            .map(|i| format!("{}{}", letter(i), letter(i + 1)))
            .collect();
        let subscripts = format!("{}->{}{}", words.join(","), letter(0), letter(k));
        let net = Network::einsum(&subscripts).unwrap();
        let dims: Vec<&[usize]> = inputs.iter().map(|t| t.dims()).collect();
        let plan = NetworkPlan::new(&net, &dims, &Order::Default)
            .unwrap_or_else(|e| panic!("{}: planning {subscripts}: {e}", case.id));
        let xs: Vec<B::Tensor> = inputs
            .iter()
            .map(|t| be.from_host((*t).clone()).unwrap())
            .collect();
        let refs: Vec<&B::Tensor> = xs.iter().collect();
        oracle_probes(be, &plan, &refs, case, &subscripts);
    }
}

/// Every probe of an oracle case through `plan` on the backend: the JVP through
/// [`NetworkPlan::frule`] and the VJP of every operand through [`NetworkPlan::rrule`], within
/// [`OracleCase::first_order_tolerance`](crate::oracle::OracleCase::first_order_tolerance).
///
/// # Panics
/// On the first mismatch or error.
pub(crate) fn oracle_probes<B: Backend>(
    be: &B,
    plan: &NetworkPlan,
    refs: &[&B::Tensor],
    case: &crate::oracle::OracleCase,
    what: &str,
) {
    let names: Vec<&String> = case.inputs.keys().collect();
    let tol = case.first_order_tolerance();
    for probe in &case.probes {
        let dxs: Vec<B::Tensor> = names
            .iter()
            .map(|n| be.from_host(probe.direction[*n].clone()).unwrap())
            .collect();
        let tangents: Vec<Option<&B::Tensor>> = dxs.iter().map(Some).collect();
        let (_, jvp) = plan.frule(be, refs, &tangents).unwrap();
        tol.check(
            &Value::Tensor(be.to_host(&jvp).unwrap()),
            &Value::Tensor(probe.jvp.clone()),
            &format!("{} JVP ({what})", case.id),
        )
        .unwrap();
        let (_, pullback) = plan.rrule(be, refs, &vec![true; refs.len()]).unwrap();
        let cbar = be.from_host(probe.cotangent.clone()).unwrap();
        let grads = pullback.pullback(&cbar).unwrap();
        for (n, g) in names.iter().zip(grads) {
            let g = be.to_host(&g.expect("every operand is active")).unwrap();
            tol.check(
                &Value::Tensor(g),
                &Value::Tensor(probe.vjp[*n].clone()),
                &format!("{} VJP {n} ({what})", case.id),
            )
            .unwrap();
        }
    }
}
