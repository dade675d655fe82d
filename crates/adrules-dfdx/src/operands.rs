//! [`Operands`]: the operand list of a many-operand op (a network, an implicit function).

use adrules_core::{Dims, HostTensor, Result};
use dfdx::prelude::{HasShape, Shape, SplitTape, Tape, Tensor};
use dfdx::tensor::Cpu;

use crate::bridge::{contiguous, dims_of, host_vec};
use crate::element::DfdxElement;
use crate::record::{Buffer, buffer};
use crate::tape::JoinTapes;

/// The operands of a many-operand op: dfdx tensors of element type `E`, each of its own
/// shape type and tape. Implemented for
/// - tuples of 1 to 8 tensors, `(Tensor<S0, E, Cpu, T0>, Tensor<S1, E, Cpu, T1>, …)`: the
///   result carries the tapes joined left to right ([`JoinTapes`]), so any operand may carry
///   the tape;
/// - `Vec<Tensor<S, E, Cpu, T>>` (any number of operands of one shape type and tape type):
///   the result carries the tapes merged.
///
/// Sealed: the list of implementations is fixed.
pub trait Operands<E: DfdxElement>: private::Sealed {
    /// The tape the op's result carries.
    type Tape: Tape<E, Cpu>;

    /// The number of operands.
    fn count(&self) -> usize;

    /// The dims of every operand, in order.
    fn dims(&self) -> Vec<Dims>;

    #[doc(hidden)]
    /// Makes every operand contiguous, copies its elements to the host, and keeps its
    /// gradient key; joins the tapes.
    fn collect(self) -> Result<Collected<E, Self::Tape>>;
}

/// The operands of one call, collected: one row-major host copy of each, the keys of their
/// gradient buffers, the joined tape, and the device of the first operand.
#[doc(hidden)]
pub struct Collected<E: DfdxElement, T> {
    pub(crate) device: Cpu,
    pub(crate) data: Vec<HostTensor>,
    pub(crate) keys: Vec<(Box<Buffer<E>>, Dims)>,
    pub(crate) tape: T,
}

/// One operand: contiguous, copied to the host, its key, its tape.
struct One<E: DfdxElement, T> {
    device: Cpu,
    data: HostTensor,
    key: (Box<Buffer<E>>, Dims),
    tape: T,
}

fn one<S: Shape, E: DfdxElement, T: Tape<E, Cpu>>(t: Tensor<S, E, Cpu, T>) -> Result<One<E, T>> {
    let (t, tape) = contiguous(t)?.split_tape();
    let dims = dims_of(t.shape());
    let data = HostTensor::from_vec(&dims, host_vec(&t))?;
    let ghost = t.ghost();
    Ok(One {
        device: t.device().clone(),
        data,
        key: (
            buffer(move |g| Ok(&mut **g.get_or_alloc_mut(&ghost)?)),
            dims,
        ),
        tape,
    })
}

pub(crate) mod private {
    /// Seals [`Operands`](super::Operands).
    pub trait Sealed {}
}

impl<S: Shape, E: DfdxElement, T: Tape<E, Cpu>> private::Sealed for Vec<Tensor<S, E, Cpu, T>> {}

impl<S: Shape, E: DfdxElement, T: Tape<E, Cpu>> Operands<E> for Vec<Tensor<S, E, Cpu, T>> {
    type Tape = T;

    fn count(&self) -> usize {
        self.len()
    }

    fn dims(&self) -> Vec<Dims> {
        self.iter().map(|t| dims_of(t.shape())).collect()
    }

    fn collect(self) -> Result<Collected<E, T>> {
        let mut out = Collected {
            device: self.first().map(|t| t.device().clone()).unwrap_or_default(),
            data: Vec::with_capacity(self.len()),
            keys: Vec::with_capacity(self.len()),
            tape: T::default(),
        };
        for t in self {
            let o = one(t)?;
            out.data.push(o.data);
            out.keys.push(o.key);
            out.tape = out.tape.merge(o.tape);
        }
        Ok(out)
    }
}

/// `Operands` for a tuple of tensors `(t0, t1, …)`.
macro_rules! tuple_operands {
    ($n:expr; $($t:ident $S:ident $T:ident),+) => {
        impl<E: DfdxElement, $($S: Shape, $T: Tape<E, Cpu>),+> private::Sealed
            for ($(Tensor<$S, E, Cpu, $T>,)+)
        {
        }

        impl<E: DfdxElement, $($S: Shape, $T: Tape<E, Cpu>),+> Operands<E>
            for ($(Tensor<$S, E, Cpu, $T>,)+)
        where
            ($($T,)+): JoinTapes<E>,
        {
            type Tape = <($($T,)+) as JoinTapes<E>>::Joined;

            fn count(&self) -> usize {
                $n
            }

            fn dims(&self) -> Vec<Dims> {
                let ($($t,)+) = self;
                vec![$(dims_of($t.shape())),+]
            }

            fn collect(self) -> Result<Collected<E, Self::Tape>> {
                let ($($t,)+) = self;
                $(let $t = one($t)?;)+
                let device = [$(&$t.device),+][0].clone();
                Ok(Collected {
                    device,
                    data: vec![$($t.data),+],
                    keys: vec![$($t.key),+],
                    tape: ($($t.tape,)+).join_all(),
                })
            }
        }
    };
}
tuple_operands!(1; t0 S0 T0);
tuple_operands!(2; t0 S0 T0, t1 S1 T1);
tuple_operands!(3; t0 S0 T0, t1 S1 T1, t2 S2 T2);
tuple_operands!(4; t0 S0 T0, t1 S1 T1, t2 S2 T2, t3 S3 T3);
tuple_operands!(5; t0 S0 T0, t1 S1 T1, t2 S2 T2, t3 S3 T3, t4 S4 T4);
tuple_operands!(6; t0 S0 T0, t1 S1 T1, t2 S2 T2, t3 S3 T3, t4 S4 T4, t5 S5 T5);
tuple_operands!(7; t0 S0 T0, t1 S1 T1, t2 S2 T2, t3 S3 T3, t4 S4 T4, t5 S5 T5, t6 S6 T6);
tuple_operands!(8; t0 S0 T0, t1 S1 T1, t2 S2 T2, t3 S3 T3, t4 S4 T4, t5 S5 T5, t6 S6 T6, t7 S7 T7);
