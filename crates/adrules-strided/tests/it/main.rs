//! The integration tests of `adrules-strided`, one binary: the conformance suite on the
//! strided backend (`conformance`), property tests of every kernel against the naive
//! reference, the one entry for every primitive call, value semantics, layouts, the buffer cache and the pooling allocator.

mod support;

mod batched;
mod buffer_cache;
mod conformance;
mod empty_views;
mod gemm_orientation;
mod network_alloc_count;
mod network_pool;
mod network_sliced_memory;
mod primitive_entry;
mod reduce_precision;
mod reference;
mod semantics;
