//! [`JoinTape`]: which tape the result of a two-operand op carries.
//!
//! dfdx puts the tape on the left operand of its binary ops (`Merge`), and has no
//! `NoneTape: Merge<OwnedTape>`: `matmul(untraced, traced)` does not compile there. Our ops
//! join tapes with this trait instead, implemented for every pair:
//!
//! | left | right | result |
//! |---|---|---|
//! | any tape `T` | `NoneTape` | `T` |
//! | `NoneTape` | `OwnedTape` | `OwnedTape` (the right operand's tape) |
//! | `OwnedTape` | `OwnedTape` | `OwnedTape` (dfdx's `Merge`) |
//!
//! so an untraced left operand with a traced right one compiles and gets gradients. Code
//! generic over a tape `T` can pass a `NoneTape` right operand (a parameter) without extra
//! bounds, since `T: JoinTape<E, NoneTape>` holds for every tape; a generic right operand `R`
//! needs the bound `L: JoinTape<E, R>`, as dfdx's own binary ops need `L: Merge<R>`.

use dfdx::dtypes::Unit;
use dfdx::prelude::{Merge, NoneTape, OwnedTape, Tape};
use dfdx::tensor::Cpu;

/// Joins the tape of a left operand (`Self`) with that of a right operand (`R`).
pub trait JoinTape<E: Unit, R>: Tape<E, Cpu> {
    /// The joined tape, carried by the result.
    type Joined: Tape<E, Cpu>;
    /// Joins the two tapes (the backward operations of both, in creation order).
    fn join(self, right: R) -> Self::Joined;
}

impl<E: Unit, T: Tape<E, Cpu>> JoinTape<E, NoneTape> for T {
    type Joined = T;
    fn join(self, _: NoneTape) -> T {
        self
    }
}

impl<E: Unit> JoinTape<E, OwnedTape<E, Cpu>> for NoneTape {
    type Joined = OwnedTape<E, Cpu>;
    fn join(self, right: OwnedTape<E, Cpu>) -> OwnedTape<E, Cpu> {
        right
    }
}

impl<E: Unit> JoinTape<E, OwnedTape<E, Cpu>> for OwnedTape<E, Cpu> {
    type Joined = OwnedTape<E, Cpu>;
    fn join(self, right: OwnedTape<E, Cpu>) -> OwnedTape<E, Cpu> {
        self.merge(right)
    }
}

/// Joins the tapes of several operands, left to right: `(T0, T1, T2)` joins as
/// `(T0 ⋈ T1) ⋈ T2` with [`JoinTape`]. Implemented for tuples of 1 to 8 tapes; the tape
/// carried by the result of a many-operand op ([`Operands`](crate::Operands)).
pub trait JoinTapes<E: Unit> {
    /// The joined tape.
    type Joined: Tape<E, Cpu>;
    /// Joins the tapes.
    fn join_all(self) -> Self::Joined;
}

impl<E: Unit, T0: Tape<E, Cpu>> JoinTapes<E> for (T0,) {
    type Joined = T0;
    fn join_all(self) -> T0 {
        self.0
    }
}

/// `JoinTapes` for `(T0, T1, rest…)` through `(T0 ⋈ T1, rest…)`.
macro_rules! join_tapes {
    ($t0:ident $T0:ident, $t1:ident $T1:ident $(, $t:ident $T:ident)*) => {
        impl<E: Unit, $T0, $T1 $(, $T)*> JoinTapes<E> for ($T0, $T1 $(, $T)*)
        where
            $T0: JoinTape<E, $T1>,
            (<$T0 as JoinTape<E, $T1>>::Joined, $($T,)*): JoinTapes<E>,
        {
            type Joined = <(<$T0 as JoinTape<E, $T1>>::Joined, $($T,)*) as JoinTapes<E>>::Joined;
            fn join_all(self) -> Self::Joined {
                let ($t0, $t1 $(, $t)*) = self;
                ($t0.join($t1), $($t,)*).join_all()
            }
        }
    };
}
join_tapes!(t0 T0, t1 T1);
join_tapes!(t0 T0, t1 T1, t2 T2);
join_tapes!(t0 T0, t1 T1, t2 T2, t3 T3);
join_tapes!(t0 T0, t1 T1, t2 T2, t3 T3, t4 T4);
join_tapes!(t0 T0, t1 T1, t2 T2, t3 T3, t4 T4, t5 T5);
join_tapes!(t0 T0, t1 T1, t2 T2, t3 T3, t4 T4, t5 T5, t6 T6);
join_tapes!(t0 T0, t1 T1, t2 T2, t3 T3, t4 T4, t5 T5, t6 T6, t7 T7);
