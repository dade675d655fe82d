//! Conditions written as tensor networks, differentiated by the network rules: no Jacobian
//! code from the user.
//!
//! The conditions are a linear combination of networks whose operands are the inputs `x`,
//! the unknown `y` (possibly in several operand slots, for conditions nonlinear in `y`) and
//! constants:
//! `c(x, y) = Σ_k γ_k · N_k(operands_k)`, every `N_k` with the shape of `y`.
//! Each network is multilinear in its operands, so at a point
//! - `A·v = Σ_k γ_k · Σ_{slots s of y} ∂N_k/∂(slot s)·v`: one network pushforward
//!   ([`NetworkPlan::frule`]) with the tangent `v` in every `y` slot;
//! - `Aᴴ·u = Σ_k conj(γ_k) · Σ_{slots of y} (slot cotangent)`: one network pullback
//!   ([`NetworkPullback::pullback`]) of `u`, recorded once per point and applied to every
//!   right-hand side;
//! - `B·v` and `Bᴴ·u` the same with the slots of each input;
//! - second derivatives ([`LinearMaps::adjoint_tangent`]): the tangents of `Aᴴ·u` and `Bᴴ·u`
//!   along `(dx, dy)` are the network second-order rule ([`NetworkPlan::second_order`]) of
//!   each term with the cotangent `u` and the tangents in their slots, summed with
//!   `conj(γ_k)`.
//!
//! Everything runs on any [`Backend`]; the maps copy each host vector to the backend and
//! back (`O(m + n)` per product). A fixed point `y = N(x, y)` is
//! [`FixedPoint`](super::FixedPoint) around these conditions.

use crate::alloc::HeapAllocator;
use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::host::{HostElement, HostTensor};
use crate::network::{NetworkPlan, NetworkPullback, SecondOrder};
use crate::scalar::DynScalar;
use crate::spec::Dims;

use super::ImplicitScalar;
use super::conditions::{Conditions, Point, typed};
use super::maps::{LinearMaps, Structure};

/// Where an operand of a network term comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TermOperand {
    /// input `x[i]` (differentiated: contributes to `B`)
    Input(usize),
    /// the unknown `y` (differentiated: contributes to `A`)
    Unknown,
    /// constant `k` of [`NetworkConditions::constant`] (zero tangent, no cotangent)
    Constant(usize),
}

#[derive(Clone, Debug)]
struct Term {
    coefficient: DynScalar,
    plan: NetworkPlan,
    operands: Vec<TermOperand>,
}

/// Conditions `c(x, y) = Σ_k γ_k · N_k(operands_k)` given as tensor networks (see the
/// [`implicit`](crate::implicit) module); implements [`Conditions`] for every element type the
/// backend stores.
#[derive(Clone, Debug)]
pub struct NetworkConditions<B: Backend> {
    backend: B,
    terms: Vec<Term>,
    constants: Vec<B::Tensor>,
    structure: Structure,
}

impl<B: Backend> NetworkConditions<B> {
    /// No terms yet (`c = 0`), on `backend`.
    pub fn new(backend: B) -> Self {
        NetworkConditions {
            backend,
            terms: Vec::new(),
            constants: Vec::new(),
            structure: Structure::General,
        }
    }

    /// Adds a constant operand; returns its index for [`TermOperand::Constant`].
    pub fn constant(&mut self, t: B::Tensor) -> usize {
        self.constants.push(t);
        self.constants.len() - 1
    }

    /// Adds the term `γ·N(operands)`, `N` given by its plan (built once, executed at every
    /// point and for every product).
    ///
    /// # Errors
    /// [`Error::CountMismatch`] (argument `"operands"`) when there is not one operand per
    /// network operand; [`Error::InvalidArgument`] for a constant index not yet added.
    pub fn term(
        mut self,
        coefficient: impl Into<DynScalar>,
        plan: NetworkPlan,
        operands: &[TermOperand],
    ) -> Result<Self> {
        if operands.len() != plan.num_operands() {
            return Err(Error::CountMismatch {
                arg: "operands".into(),
                expected: plan.num_operands(),
                actual: operands.len(),
            });
        }
        if let Some(TermOperand::Constant(k)) = operands
            .iter()
            .find(|o| matches!(o, TermOperand::Constant(k) if *k >= self.constants.len()))
        {
            return Err(Error::invalid(
                "operands",
                format!(
                    "constant {k} does not exist ({} added)",
                    self.constants.len()
                ),
            ));
        }
        self.terms.push(Term {
            coefficient: coefficient.into(),
            plan,
            operands: operands.to_vec(),
        });
        Ok(self)
    }

    /// Declares the structure of `A = ∂c/∂y` (default [`Structure::General`]).
    pub fn with_structure(mut self, structure: Structure) -> Self {
        self.structure = structure;
        self
    }
}

/// One term at a point: its operand handles and its recorded pullback.
struct TermAt<B: Backend> {
    coefficient: DynScalar,
    plan: NetworkPlan,
    operands: Vec<TermOperand>,
    handles: Vec<B::Tensor>,
    pullback: NetworkPullback<B>,
}

/// The linear maps of [`NetworkConditions`] at one point.
pub struct NetworkMaps<B: Backend, T> {
    backend: B,
    y_dims: Dims,
    x_dims: Vec<Dims>,
    terms: Vec<TermAt<B>>,
    values: Vec<T>,
    structure: Structure,
}

fn upload<B: Backend, T: HostElement>(be: &B, dims: &[usize], v: &[T]) -> Result<B::Tensor> {
    be.from_host(HostTensor::from_vec(dims, v.to_vec())?)
}

fn download<B: Backend, T: HostElement>(be: &B, t: &B::Tensor, what: &str) -> Result<Vec<T>> {
    let h = be.to_host(t)?;
    Ok(typed::<T>(&h, what)?.to_vec())
}

impl<T, Z, A, B> Conditions<T, Z, A> for NetworkConditions<B>
where
    T: ImplicitScalar,
    A: ?Sized,
    B: Backend + Send + Sync + 'static,
    B::Tensor: Send + Sync,
{
    fn linearize(&self, at: &Point<'_, Z, A>) -> Result<Box<dyn LinearMaps<T>>> {
        let be = &self.backend;
        let y_dims: Dims = at.y.dims().iter().copied().collect();
        let y = upload(be, &y_dims, typed::<T>(at.y, "y")?)?;
        let xs: Vec<B::Tensor> =
            at.x.iter()
                .enumerate()
                .map(|(i, x)| upload(be, x.dims(), typed::<T>(x, &format!("x[{i}]"))?))
                .collect::<Result<_>>()?;
        let m: usize = y_dims.iter().product();
        let mut values = vec![T::zero(); m];
        let mut terms = Vec::with_capacity(self.terms.len());
        for (k, term) in self.terms.iter().enumerate() {
            let handles: Vec<B::Tensor> = term
                .operands
                .iter()
                .map(|o| match *o {
                    TermOperand::Input(i) => {
                        xs.get(i).cloned().ok_or_else(|| Error::CountMismatch {
                            arg: "x".into(),
                            expected: i + 1,
                            actual: xs.len(),
                        })
                    }
                    TermOperand::Unknown => Ok(y.clone()),
                    TermOperand::Constant(c) => Ok(self.constants[c].clone()),
                })
                .collect::<Result<_>>()?;
            if term.plan.output_dims() != y_dims.as_slice() {
                return Err(Error::shape(
                    format!("network term {k} (its output must have the shape of y)"),
                    &y_dims,
                    term.plan.output_dims(),
                ));
            }
            let active: Vec<bool> = term
                .operands
                .iter()
                .map(|o| !matches!(o, TermOperand::Constant(_)))
                .collect();
            let refs: Vec<&B::Tensor> = handles.iter().collect();
            let (value, pullback) = term.plan.rrule(be, &refs, &active)?;
            let gamma = T::from_dyn(term.coefficient)?;
            for (c, v) in values
                .iter_mut()
                .zip(download::<B, T>(be, &value, "network term")?)
            {
                *c += gamma * v;
            }
            terms.push(TermAt {
                coefficient: term.coefficient,
                plan: term.plan.clone(),
                operands: term.operands.clone(),
                handles,
                pullback,
            });
        }
        Ok(Box::new(NetworkMaps {
            backend: be.clone(),
            y_dims,
            x_dims: at
                .x
                .iter()
                .map(|x| x.dims().iter().copied().collect())
                .collect(),
            terms,
            values,
            structure: self.structure,
        }))
    }
}

impl<B: Backend, T: ImplicitScalar> NetworkMaps<B, T> {
    fn x_offsets(&self) -> Vec<usize> {
        let mut off = vec![0];
        for d in &self.x_dims {
            off.push(off.last().copied().unwrap_or(0) + d.iter().product::<usize>());
        }
        off
    }

    /// `out = Σ_k γ_k ∂N_k · v` with `v` uploaded into the slots `which` selects.
    fn push(
        &self,
        v: &[T],
        out: &mut [T],
        slot: impl Fn(TermOperand) -> Option<usize>,
    ) -> Result<()> {
        let be = &self.backend;
        let off = self.x_offsets();
        out.iter_mut().for_each(|o| *o = T::zero());
        // One tangent tensor per differentiated value (each input, then y), uploaded once.
        let mut tangents: Vec<Option<B::Tensor>> = vec![None; self.x_dims.len() + 1];
        for o in self.terms.iter().flat_map(|t| &t.operands) {
            if let Some(s) = slot(*o)
                && tangents[s].is_none()
            {
                let (dims, part) = if s == self.x_dims.len() {
                    (&self.y_dims, v)
                } else {
                    (&self.x_dims[s], &v[off[s]..off[s + 1]])
                };
                tangents[s] = Some(upload(be, dims, part)?);
            }
        }
        for term in &self.terms {
            let t: Vec<Option<&B::Tensor>> = term
                .operands
                .iter()
                .map(|o| slot(*o).and_then(|s| tangents[s].as_ref()))
                .collect();
            if t.iter().all(Option::is_none) {
                continue;
            }
            let refs: Vec<&B::Tensor> = term.handles.iter().collect();
            let (_, dn) = term.plan.frule(be, &refs, &t)?;
            let gamma = T::from_dyn(term.coefficient)?;
            for (o, d) in out
                .iter_mut()
                .zip(download::<B, T>(be, &dn, "network tangent")?)
            {
                *o += gamma * d;
            }
        }
        Ok(())
    }

    /// `out = Σ_k conj(γ_k) Σ_{slots} cotangent(slot)`, slots mapped to output segments.
    fn pull(
        &self,
        u: &[T],
        out: &mut [T],
        segment: impl Fn(TermOperand) -> Option<(usize, usize)>,
    ) -> Result<()> {
        let be = &self.backend;
        out.iter_mut().for_each(|o| *o = T::zero());
        let u_dev = upload(be, &self.y_dims, u)?;
        for term in &self.terms {
            if term.operands.iter().all(|o| segment(*o).is_none()) {
                continue;
            }
            let cot = term.pullback.pullback(&u_dev)?;
            let gamma = T::from_dyn(term.coefficient)?.conj();
            for (o, g) in term.operands.iter().zip(cot) {
                let (Some((start, end)), Some(g)) = (segment(*o), g) else {
                    continue;
                };
                for (x, v) in
                    out[start..end]
                        .iter_mut()
                        .zip(download::<B, T>(be, &g, "network cotangent")?)
                {
                    *x += gamma * v;
                }
            }
        }
        Ok(())
    }
}

impl<B, T> LinearMaps<T> for NetworkMaps<B, T>
where
    T: ImplicitScalar,
    B: Backend + Send + Sync,
    B::Tensor: Send + Sync,
{
    fn num_unknowns(&self) -> usize {
        self.values.len()
    }

    fn num_inputs(&self) -> usize {
        self.x_offsets().last().copied().unwrap_or(0)
    }

    fn structure(&self) -> Structure {
        self.structure
    }

    fn apply_a(&self, v: &[T], out: &mut [T], k: usize) -> Result<()> {
        let (m, ny) = (self.num_unknowns(), self.x_dims.len());
        for j in 0..k {
            self.push(&v[j * m..(j + 1) * m], &mut out[j * m..(j + 1) * m], |o| {
                (o == TermOperand::Unknown).then_some(ny)
            })?;
        }
        Ok(())
    }

    fn apply_a_adjoint(&self, u: &[T], out: &mut [T], k: usize) -> Result<()> {
        let m = self.num_unknowns();
        for j in 0..k {
            self.pull(&u[j * m..(j + 1) * m], &mut out[j * m..(j + 1) * m], |o| {
                (o == TermOperand::Unknown).then_some((0, m))
            })?;
        }
        Ok(())
    }

    fn apply_b(&self, v: &[T], out: &mut [T], k: usize) -> Result<()> {
        let (m, n) = (self.num_unknowns(), self.num_inputs());
        for j in 0..k {
            self.push(
                &v[j * n..(j + 1) * n],
                &mut out[j * m..(j + 1) * m],
                |o| match o {
                    TermOperand::Input(i) => Some(i),
                    _ => None,
                },
            )?;
        }
        Ok(())
    }

    fn apply_b_adjoint(&self, u: &[T], out: &mut [T], k: usize) -> Result<()> {
        let (m, n) = (self.num_unknowns(), self.num_inputs());
        let off = self.x_offsets();
        for j in 0..k {
            self.pull(
                &u[j * m..(j + 1) * m],
                &mut out[j * n..(j + 1) * n],
                |o| match o {
                    TermOperand::Input(i) => Some((off[i], off[i + 1])),
                    _ => None,
                },
            )?;
        }
        Ok(())
    }

    fn conditions(&self) -> Option<&[T]> {
        Some(&self.values)
    }

    /// `wy = Σ_k conj(γ_k) Σ_{y slots} (slot's cotangent tangent)` and `wx` the same over
    /// the input slots: one network second-order rule per term
    /// ([`NetworkPlan::second_order`] with `C̄ = u` and the tangents `dx`, `dy` in their
    /// slots), every term being a network of the slots.
    fn adjoint_tangent(
        &self,
        u: &[T],
        dx: &[T],
        dy: &[T],
        wy: &mut [T],
        wx: &mut [T],
    ) -> Result<()> {
        let be = &self.backend;
        let off = self.x_offsets();
        wy.iter_mut().for_each(|w| *w = T::zero());
        wx.iter_mut().for_each(|w| *w = T::zero());
        let u_dev = upload(be, &self.y_dims, u)?;
        let dy_dev = upload(be, &self.y_dims, dy)?;
        let dx_dev: Vec<B::Tensor> = self
            .x_dims
            .iter()
            .enumerate()
            .map(|(i, dims)| upload(be, dims, &dx[off[i]..off[i + 1]]))
            .collect::<Result<_>>()?;
        for term in &self.terms {
            let tangents: Vec<Option<&B::Tensor>> = term
                .operands
                .iter()
                .map(|o| match *o {
                    TermOperand::Input(i) => dx_dev.get(i),
                    TermOperand::Unknown => Some(&dy_dev),
                    TermOperand::Constant(_) => None,
                })
                .collect();
            let active: Vec<bool> = tangents.iter().map(Option::is_some).collect();
            let refs: Vec<&B::Tensor> = term.handles.iter().collect();
            let request = SecondOrder {
                c_bar: &u_dev,
                c_bar_dot: None,
                tangents: &tangents,
                active: &active,
                gradient: false,
            };
            let r = term
                .plan
                .second_order(be, &HeapAllocator, &refs, &request)?;
            let gamma = T::from_dyn(term.coefficient)?.conj();
            for (o, h) in term.operands.iter().zip(r.hvp) {
                let (out, Some(h)) = (
                    match *o {
                        TermOperand::Input(i) => &mut wx[off[i]..off[i + 1]],
                        TermOperand::Unknown => &mut wy[..],
                        TermOperand::Constant(_) => continue,
                    },
                    h,
                ) else {
                    continue;
                };
                for (w, v) in
                    out.iter_mut()
                        .zip(download::<B, T>(be, &h, "network cotangent tangent")?)
                {
                    *w += gamma * v;
                }
            }
        }
        Ok(())
    }
}
