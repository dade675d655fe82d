//! The conformance suite on the burn adapter's backend over burn's Flex CPU backend (f32 and
//! f64; burn has no complex dtype).
#![cfg(feature = "burn")]

mod conformance;

use adrules::burn::BurnBackend;
use adrules::burn::burn_flex::Flex;

conformance::suite!(BurnBackend::<Flex>::new(Default::default()));
