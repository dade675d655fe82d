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
