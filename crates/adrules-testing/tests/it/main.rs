//! The integration tests of `adrules-testing`, one binary: the conformance suite on the naive
//! reference backend (the rules are right independently of any fast kernel), and the
//! suite's own power to fail (`conformance_faults`: each check, run with one injected defect,
//! must panic); `check_rule` on a correct rule and on injected defects (`rule`).

mod conformance;
mod conformance_faults;
mod rule;
