//! Rule-checking utilities (work in progress).
