//! The conformance suite on the embedded strided backend.

mod conformance;

conformance::suite!(adrules::strided::Strided);
