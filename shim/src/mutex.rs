//! The shim's one way to take a `std` mutex. A holder that panicked leaves
//! the data as it was at the panic; every guarded map here (records, exit
//! records, CPU samples) stays valid at any point, so the lock is taken
//! anyway (and release builds abort on panic before anyone could see it).

use std::sync::{Mutex, MutexGuard};

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
