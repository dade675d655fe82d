//! The thread-local allocation hook: where the backend takes the buffers it creates itself.
//!
//! Every buffer the backend allocates on its own (the storage of a new tensor, the copy made
//! by copy-on-write, the scratch space of a contraction) comes from [`shared`], [`zeros`] or
//! [`Scratch`]. They ask the [`Recycler`] installed on the current thread by [`scope`] (the
//! [`BufferPool`](crate::BufferPool) of an enclosing `BufferPool::scope`) for a recycled
//! buffer, and otherwise allocate with [`zeroed`](crate::storage::zeroed).
//!
//! The modules are layered without cycles: `storage` (the buffers) ← `hook` (this module:
//! the installed recycler, as a trait object) ← `pool` (`BufferPool`, which implements
//! [`Recycler`] and installs itself through [`scope`]).

use std::cell::RefCell;
use std::sync::Arc;

use adrules_core::{DType, Error, Result};

use crate::element::Element;
use crate::storage::{self, Storage};

/// A source of recycled buffers that [`scope`] installs on a thread.
pub(crate) trait Recycler: Send + Sync {
    /// Removes and returns a held buffer of `dtype` suitable for `len` elements (at least
    /// `len` long) that the recycler solely owns, or `None` when it holds none (the caller
    /// then allocates a fresh one).
    fn recycle(&self, dtype: DType, len: usize) -> Option<Storage>;

    /// Takes a buffer back for later reuse.
    fn give(&self, s: Storage);
}

/// The recycler installed on a thread, if any.
type Installed = Option<Arc<dyn Recycler>>;

thread_local! {
    /// The recycler installed by [`scope`] on this thread.
    static CURRENT: RefCell<Installed> = const { RefCell::new(None) };
}

/// Restores the previously installed recycler when a scope ends (also on unwinding).
struct Restore(Installed);

impl Drop for Restore {
    fn drop(&mut self) {
        let prev = self.0.take();
        CURRENT.with(|c| *c.borrow_mut() = prev);
    }
}

/// The recycler installed on this thread, if any.
pub(crate) fn current() -> Installed {
    CURRENT.with(|c| c.borrow().clone())
}

/// Runs `f` with `recycler` installed on the current thread; the previous one is restored
/// when `f` returns or unwinds, so scopes nest. Work that `f` hands to other threads
/// allocates normally.
pub(crate) fn scope<R>(recycler: Arc<dyn Recycler>, f: impl FnOnce() -> R) -> R {
    let prev = CURRENT.with(|c| c.replace(Some(recycler)));
    let _restore = Restore(prev);
    f()
}

/// Takes the unique buffer of a dropped tensor back: the recycler installed on this thread (a
/// [`BufferPool`](crate::BufferPool) scope) takes every size, so a loop inside the scope finds
/// its temporaries in the pool again whether they were freed or dropped; without one, the
/// process-wide [`cache`](crate::cache) takes it when it is at least
/// [`MIN_BYTES`](crate::cache::MIN_BYTES) long (smaller buffers go back to the system).
pub(crate) fn give_dropped(s: Storage) {
    let s = match CURRENT.try_with(|c| match &*c.borrow() {
        Some(r) => {
            r.give(s);
            None
        }
        None => Some(s),
    }) {
        Ok(None) => return,
        Ok(Some(s)) => s,
        // the thread is exiting and its hook is gone
        Err(_) => return,
    };
    if s.len() * s.dtype().size_of() >= crate::cache::MIN_BYTES {
        crate::cache::global().give(s);
    }
}

/// A unique buffer of at least `len` elements of `T` from `from` (recycled when it holds a
/// suitable one, else freshly allocated), whose first `len` elements are zero when `zero`
/// (else unspecified but initialised).
///
/// # Errors
/// As [`storage::zeroed`]; [`Error::InvalidArgument`] (argument `"pool"`) when the recycler
/// breaks its contract (a buffer of another dtype, or a shared one).
pub(crate) fn take<T: Element>(from: &dyn Recycler, len: usize, zero: bool) -> Result<Arc<Vec<T>>> {
    let Some(s) = from.recycle(T::DTYPE, len) else {
        return Ok(Arc::new(storage::zeroed::<T>(len)?));
    };
    // clone the typed handle out, then drop the untyped one: the count is back to one
    let buf = T::buffer(&s).cloned();
    drop(s);
    let mut buf =
        buf.ok_or_else(|| Error::invalid("pool", "a recycled buffer changed its dtype"))?;
    if buf.len() < len {
        return Err(Error::invalid("pool", "a recycled buffer is too short"));
    }
    let v = Arc::get_mut(&mut buf)
        .ok_or_else(|| Error::invalid("pool", "a recycled buffer is shared"))?;
    if zero {
        v[..len].fill(T::zero());
    }
    Ok(buf)
}

/// A unique shared buffer of at least `len` elements, whose first `len` are zero when `zero`
/// (else unspecified but initialised): from the recycler installed on this thread, else from
/// the process-wide [`cache`](crate::cache) (see [`take`]), else from [`storage::zeroed`].
///
/// # Errors
/// As [`take`].
pub(crate) fn shared<T: Element>(len: usize, zero: bool) -> Result<Arc<Vec<T>>> {
    take::<T>(&*recycler(), len, zero)
}

/// The recycler installed on this thread, else the process-wide [`cache`](crate::cache).
pub(crate) fn recycler() -> Arc<dyn Recycler> {
    current().unwrap_or_else(|| crate::cache::global().clone())
}

/// A new buffer of `len` zeros of `dtype`, through [`shared`].
///
/// # Errors
/// [`Error::InvalidArgument`] when `len` elements do not fit in the address space.
pub(crate) fn zeros(dtype: DType, len: usize) -> Result<Storage> {
    Ok(match dtype {
        DType::F32 => Storage::F32(shared(len, true)?),
        DType::F64 => Storage::F64(shared(len, true)?),
        DType::C32 => Storage::C32(shared(len, true)?),
        DType::C64 => Storage::C64(shared(len, true)?),
    })
}

/// Scratch space of a kernel: a unique buffer of `len` elements with unspecified contents,
/// from the recycler installed on this thread or the process-wide cache (given back to it
/// when dropped), or from the system.
pub(crate) struct Scratch<T: Element> {
    ptr: *mut T,
    buf: Option<(Arc<Vec<T>>, Source)>,
}

/// Where a [`Scratch`] buffer goes back to.
type Source = Arc<dyn Recycler>;

impl<T: Element> Scratch<T> {
    /// `len` elements.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `len` elements do not fit in memory.
    pub(crate) fn new(len: usize) -> Result<Self> {
        let recycler = recycler();
        let mut buf = take::<T>(&*recycler, len, false)?;
        let ptr = Arc::get_mut(&mut buf)
            .ok_or_else(|| Error::invalid("scratch", "a fresh buffer is shared"))?
            .as_mut_ptr();
        Ok(Scratch {
            ptr,
            buf: Some((buf, recycler)),
        })
    }

    /// Pointer to the first element; valid for the requested length while `self` lives.
    pub(crate) fn as_mut_ptr(&mut self) -> *mut T {
        self.ptr
    }

    /// Read-only pointer to the first element.
    pub(crate) fn as_ptr(&self) -> *const T {
        self.ptr
    }
}

impl<T: Element> Drop for Scratch<T> {
    fn drop(&mut self) {
        if let Some((buf, recycler)) = self.buf.take() {
            recycler.give(T::into_storage(buf));
        }
    }
}

// SAFETY: the buffer is uniquely owned by the guard (its `Arc` is never cloned), so sending
// the guard moves exclusive access, like sending a `Vec<T>`; the recycler is `Send + Sync`.
unsafe impl<T: Element> Send for Scratch<T> {}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// Hands out whatever it was given, whatever the request: a recycler that breaks the
    /// contract, to check that [`take`] refuses its buffers.
    #[derive(Default)]
    struct Careless(Mutex<Vec<Storage>>);

    impl Recycler for Careless {
        fn recycle(&self, _dtype: DType, _len: usize) -> Option<Storage> {
            self.0.lock().unwrap().pop()
        }
        fn give(&self, s: Storage) {
            self.0.lock().unwrap().push(s);
        }
    }

    #[test]
    fn no_recycler_allocates_zeros() {
        assert!(current().is_none());
        let b = shared::<f64>(5, false).unwrap();
        assert_eq!(*b, vec![0.0; 5]);
        assert!(matches!(zeros(DType::C32, 3).unwrap(), Storage::C32(v) if v.len() == 3));
    }

    #[test]
    fn scopes_nest_and_restore() {
        let (a, b): (Arc<dyn Recycler>, Arc<dyn Recycler>) =
            (Arc::new(Careless::default()), Arc::new(Careless::default()));
        scope(a.clone(), || {
            assert!(Arc::ptr_eq(&current().unwrap(), &a));
            scope(b.clone(), || assert!(Arc::ptr_eq(&current().unwrap(), &b)));
            assert!(Arc::ptr_eq(&current().unwrap(), &a));
        });
        assert!(current().is_none());
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            scope(a.clone(), || panic!("unwind"))
        }));
        assert!(unwound.is_err());
        assert!(current().is_none(), "an unwinding scope was not restored");
    }

    #[test]
    fn scratch_returns_its_buffer_and_zeroing_reaches_recycled_buffers() {
        let r = Arc::new(Careless::default());
        scope(r.clone(), || {
            let mut s = Scratch::<f64>::new(4).unwrap();
            // SAFETY: 4 elements were requested.
            unsafe { s.as_mut_ptr().write_bytes(0xff, 4) };
        });
        assert_eq!(r.0.lock().unwrap().len(), 1);
        let z = take::<f64>(&*r, 4, true).unwrap();
        assert_eq!(*z, vec![0.0; 4]);
    }

    #[test]
    fn a_careless_recycler_is_a_typed_error() {
        let r = Careless::default();
        r.give(Storage::F32(Arc::new(vec![0.0; 8])));
        let e = take::<f64>(&r, 8, false).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
        r.give(Storage::F64(Arc::new(vec![0.0; 2])));
        assert!(take::<f64>(&r, 8, false).is_err());
        let kept = Arc::new(vec![1.0f64; 8]);
        for zero in [false, true] {
            r.give(Storage::F64(kept.clone()));
            assert!(take::<f64>(&r, 8, zero).is_err());
        }
        assert_eq!(*kept, vec![1.0; 8], "a shared buffer was written");
    }
}
