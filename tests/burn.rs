//! The conformance suite (`adrules_testing::conformance`) on the burn adapter's backend over
//! burn's Flex CPU backend (f32 and f64; burn has no complex dtype).
#![cfg(feature = "burn")]

use adrules::burn::BurnBackend;
use adrules::burn::burn_flex::Flex;

adrules_testing::conformance_suite!(BurnBackend::<Flex>::new(Default::default()));
