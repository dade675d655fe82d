//! The integration tests of `adrules-core`, one binary: the network rules and planner, the
//! einsum grammar, implicit functions and their solvers, and the decompositions, each on the
//! strided backend and the naive reference backend, against closed forms, finite
//! differences, adjoint identities and the oracle files.

mod support;

mod einsum_grammar;
mod implicit_closed_form;
mod implicit_complex;
mod implicit_device;
mod implicit_errors;
mod implicit_network;
mod implicit_oracle;
mod implicit_policy;
mod implicit_second_order;
mod implicit_solvers;
mod linalg_clustered;
mod linalg_dense;
mod linalg_normalize;
mod linalg_oracle;
mod linalg_rules;
mod linalg_scale;
mod network_evaluate;
mod network_primal;
mod network_rules;
mod network_second_order;
mod network_slicing;
mod network_validation;
mod rule_builtin;
mod rule_drivers;
mod rule_node;
mod rule_split;
