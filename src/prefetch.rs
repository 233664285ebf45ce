//! Software prefetches: asking the CPU for lines a request is about to use, so that the trips to memory for
//! an agent out of the CPU's caches are made side by side rather than one after another.
//!
//! A request with a known key reaches its key's record, its agent's row and its agent's registry through
//! the key's cache entry, and each of them, and the rate-limit buckets and strings they point to, is first
//! touched by an atomic reference count or a lock: each waits for its line before the next can start.
//! Where the key's entry is found, every one of those lines is asked for at once
//! ([`crate::http::auth::KeyCache`]): with reads spread over 10,000 agents that took 0.2–0.3 µs off a
//! request's 14.5 µs of CPU (bench/README.md), and nothing measurable off one agent's, whose lines are at
//! hand. A prefetch is a hint: it never faults and never changes memory, so an address that misses (a
//! layout other than the one assumed below) costs a wasted request to memory, never a wrong result; on
//! other architectures these functions do nothing.

use std::sync::Arc;

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::{_MM_HINT_ET0 as WRITE, _MM_HINT_T0 as READ};
#[cfg(not(target_arch = "x86_64"))]
const WRITE: i32 = 0;
#[cfg(not(target_arch = "x86_64"))]
const READ: i32 = 0;

/// Asks for the line at `ptr`, to be written (an atomic count or a lock is next).
#[inline(always)]
pub fn for_write<T: ?Sized>(ptr: *const T) {
    prefetch::<WRITE>(ptr.cast());
}

/// Asks for the line at `ptr`, to be read.
#[inline(always)]
pub fn for_read<T: ?Sized>(ptr: *const T) {
    prefetch::<READ>(ptr.cast());
}

#[inline(always)]
fn prefetch<const HINT: i32>(ptr: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch reads nothing the program can see and never faults, whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<HINT>(ptr.cast::<i8>())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = ptr;
}

/// Asks for an `Arc`'s reference counts and the start of its value. The counts are taken to be the two
/// words before the value, where std puts them for a value aligned to at most two words (every value this
/// crate prefetches); the layout is std's own, not promised, hence a hint only.
#[inline(always)]
pub fn arc<T: ?Sized>(arc: &Arc<T>) {
    let value = Arc::as_ptr(arc).cast::<u8>();
    for_write(value.wrapping_sub(2 * size_of::<usize>()));
    for_write(value);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A prefetch is only a hint: asked for addresses no program could read, it neither faults nor changes
    /// what it is asked for.
    #[test]
    fn a_prefetch_never_faults_and_changes_nothing() {
        for_write(std::ptr::null::<u8>());
        for_read(std::ptr::without_provenance::<u8>(usize::MAX));
        let shared = Arc::new(String::from("kept"));
        arc(&shared);
        for_read(shared.as_ptr());
        assert_eq!(*shared, "kept");
        assert_eq!(Arc::strong_count(&shared), 1);
    }
}
