//! The embedded strided CPU backend (work in progress).
