//! mimalloc, the allocator of the `hivegate` binary (its `#[global_allocator]` is in `src/main.rs`): the
//! options hivegate gives it at start-up, the thread that returns freed memory to the system, and the arena
//! of huge pages that holds what the caches keep ([`Allocator`], [`in_cache_scope`]).
//!
//! mimalloc's options by their index in `mi_option_t` (mimalloc v3, as `libmimalloc-sys` 0.1.49 builds it;
//! the crate exports no constants for these). A test checks that each index still holds the option's
//! default.

use std::alloc::{GlobalAlloc, Layout};
use std::cell::Cell;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};
use std::time::Duration;

use libmimalloc_sys::{
    mi_collect, mi_heap_malloc_aligned, mi_heap_realloc_aligned, mi_heap_t, mi_heap_zalloc_aligned, mi_option_set,
    mi_option_t,
};

/// Whether arenas commit their memory at once (default 2: on systems that overcommit).
pub const ARENA_EAGER_COMMIT: mi_option_t = 4;
/// How long freed memory waits before it is returned to the system, in milliseconds (default 1000).
pub const PURGE_DELAY: mi_option_t = 15;
/// Whether mimalloc asks for transparent huge pages (default 1).
pub const ALLOW_THP: mi_option_t = 43;

/// How often the purger returns the freed memory whose delay has passed.
const PURGE_EVERY: Duration = Duration::from_millis(250);

/// No transparent huge pages outside the cache's arena, and arenas made from now on commit memory only when
/// it is used, so that idle connections and streams cost about what they hold. mimalloc asks the kernel for
/// huge pages on its arenas, and a 2 MiB page is resident as a whole once any of it is written: with them,
/// the memory of an idle SSE stream doubled (about 40 KiB instead of 20, bench/README.md). The arena
/// mimalloc made before `main` has asked for huge pages already, so the process turns them off for itself
/// (`PR_SET_THP_DISABLE`, what `MIMALLOC_ALLOW_THP=0` does when mimalloc starts): from then on no page
/// becomes huge, in the memory already mapped too (the few made before `main` stay). Where the kernel can
/// (Linux 6.18 and later) it does so except for memory advised `MADV_HUGEPAGE`, after taking that advice
/// back from the memory mimalloc advised before `main`: the one memory advised then is the cache's arena
/// ([`reserve_cache_arena`]). An option the environment sets keeps the environment's value, which mimalloc
/// has already read (and acted on).
///
/// Freed memory keeps mimalloc's delay (1 s) before it goes back to the system: under load most of it is
/// used again within that second, and returning it at once (`MIMALLOC_PURGE_DELAY=0`) cost W1 about
/// 2.3 µs of CPU a request in page faults and fresh pages (bench/README.md). mimalloc purges only when a
/// thread allocates or collects, so an idle server would keep its freed memory; [`start_purger`] collects.
pub fn configure() {
    for (option, value, names) in OPTIONS {
        if let Some(value) = value
            && !set_by_environment(names)
        {
            // SAFETY: `mi_option_set` only stores the value; mimalloc reads these options when it next
            // makes an arena or purges memory, so setting them while it is in use is allowed.
            unsafe { mi_option_set(option, value) };
        }
    }
    #[cfg(target_os = "linux")]
    if !set_by_environment(ALLOW_THP_VARIABLES) {
        linux::huge_pages_only_where_advised();
    }
}

/// A thread that asks mimalloc every `PURGE_EVERY` to return the freed memory whose delay has passed
/// (arenas are process-wide, so any thread's collection purges them): an idle server, whose workers no
/// longer allocate, returns what its last requests freed within about a second and a quarter.
pub fn start_purger() -> std::io::Result<()> {
    std::thread::Builder::new().name("hivegate-purge".to_owned()).spawn(|| {
        loop {
            std::thread::sleep(PURGE_EVERY);
            // SAFETY: `mi_collect` may be called from any thread at any time; `false` collects only what
            // is due (it frees this thread's own empty pages and purges expired ranges of the arenas).
            unsafe { mi_collect(false) };
        }
    })?;
    Ok(())
}

/// Each option with the value hivegate gives it (`None`: mimalloc's default) and the environment
/// variables mimalloc reads it from (its name and its older name; mimalloc ignores their case).
const OPTIONS: [(mi_option_t, Option<std::ffi::c_long>, &[&str]); 3] = [
    (ARENA_EAGER_COMMIT, Some(0), &["MIMALLOC_ARENA_EAGER_COMMIT", "MIMALLOC_EAGER_REGION_COMMIT"]),
    (PURGE_DELAY, None, PURGE_DELAY_VARIABLES),
    (ALLOW_THP, Some(0), ALLOW_THP_VARIABLES),
];

/// The environment variables that choose [`PURGE_DELAY`] (its name and its older name).
pub const PURGE_DELAY_VARIABLES: &[&str] = &["MIMALLOC_PURGE_DELAY", "MIMALLOC_RESET_DELAY"];

/// The environment variable that chooses [`ALLOW_THP`] (it has no older name).
const ALLOW_THP_VARIABLES: &[&str] = &["MIMALLOC_ALLOW_THP"];

/// Whether the environment sets one of `names` (mimalloc reads them whatever their case).
pub fn set_by_environment(names: &[&str]) -> bool {
    std::env::vars_os()
        .any(|(key, _)| key.to_str().is_some_and(|key| names.iter().any(|name| key.eq_ignore_ascii_case(name))))
}

/// The global allocator of the `hivegate` binary: mimalloc, except that a thread in an [`in_cache_scope`]
/// allocates in the cache's arena while it has room ([`reserve_cache_arena`]). Freeing and growing a block
/// outside a scope is mimalloc's as usual, wherever the block lies.
pub struct Allocator;

/// The heap in the cache's arena, once [`reserve_cache_arena`] made it.
static CACHE_HEAP: AtomicPtr<mi_heap_t> = AtomicPtr::new(std::ptr::null_mut());
/// The cache's arena: its start and length in bytes (0 before it is made).
static CACHE_AREA: (AtomicUsize, AtomicUsize) = (AtomicUsize::new(0), AtomicUsize::new(0));

thread_local! {
    /// Whether this thread is in an [`in_cache_scope`] (a constant-initialised flag: reading it is one load).
    static IN_CACHE_SCOPE: Cell<bool> = const { Cell::new(false) };
}

/// Set when the arena had no room for a scoped allocation, cleared when the registry cache frees some
/// ([`cache_arena_freed`]): a heap that finds no room collects every arena of the process before it gives
/// up, which no allocation should pay for each time while the arena stays full.
static ARENA_FULL: AtomicBool = AtomicBool::new(false);

/// The heap a scoped allocation goes to, if this thread is in an [`in_cache_scope`] and the arena exists
/// and had room last time.
#[inline]
fn scoped_heap() -> Option<*mut mi_heap_t> {
    if !IN_CACHE_SCOPE.get() || ARENA_FULL.load(Ordering::Relaxed) {
        return None;
    }
    let heap = CACHE_HEAP.load(Ordering::Acquire);
    (!heap.is_null()).then_some(heap)
}

/// Notes that the arena had no room (a scoped allocation went elsewhere).
#[cold]
fn arena_full() {
    ARENA_FULL.store(true, Ordering::Relaxed);
}

/// Tells the allocator that what the caches kept was dropped (an eviction), so that the arena may have room
/// again.
pub fn cache_arena_freed() {
    ARENA_FULL.store(false, Ordering::Relaxed);
}

// SAFETY: every block comes from mimalloc (from the cache's heap or from `MiMalloc`, which is mimalloc's
// default heap), with the layout's size and alignment, and `mi_free`/`mi_realloc_aligned` take a block of
// any of mimalloc's heaps. A full arena makes the heap return null, and the default heap is asked instead.
unsafe impl GlobalAlloc for Allocator {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if let Some(heap) = scoped_heap() {
            // SAFETY: `heap` is a live heap (never deleted); mimalloc's heaps allocate from any thread (v3).
            let block = unsafe { mi_heap_malloc_aligned(heap, layout.size(), layout.align()) };
            if !block.is_null() {
                return block.cast();
            }
            arena_full();
        }
        // SAFETY: the caller's layout, as `GlobalAlloc::alloc` requires.
        unsafe { mimalloc::MiMalloc.alloc(layout) }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if let Some(heap) = scoped_heap() {
            // SAFETY: as in `alloc`.
            let block = unsafe { mi_heap_zalloc_aligned(heap, layout.size(), layout.align()) };
            if !block.is_null() {
                return block.cast();
            }
            arena_full();
        }
        // SAFETY: the caller's layout, as `GlobalAlloc::alloc_zeroed` requires.
        unsafe { mimalloc::MiMalloc.alloc_zeroed(layout) }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` is a block of one of mimalloc's heaps, which `mi_free` (under `MiMalloc`) takes.
        unsafe { mimalloc::MiMalloc.dealloc(ptr, layout) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if let Some(heap) = scoped_heap() {
            // SAFETY: `ptr` is a live block of mimalloc's with `layout`'s alignment; on null it is untouched.
            let block = unsafe { mi_heap_realloc_aligned(heap, ptr.cast::<c_void>(), new_size, layout.align()) };
            if !block.is_null() {
                return block.cast();
            }
            arena_full();
        }
        // SAFETY: the caller's block and layout, as `GlobalAlloc::realloc` requires.
        unsafe { mimalloc::MiMalloc.realloc(ptr, layout, new_size) }
    }
}

/// `make()`, run with what it allocates placed in the cache's arena when there is one
/// ([`reserve_cache_arena`]): for the values the registry and key caches keep, made or copied there once
/// they are loaded, so that they lie together in huge pages and a request to an agent out of the CPU's
/// caches finds them with fewer trips through the page tables (bench/README.md). Only what the caches
/// keep belongs in a scope: what is freed soon after (a query's buffers, a value's first draft) would leave
/// holes in pages that huge pages keep resident. What a scope allocates beyond the arena's room goes to
/// mimalloc's other arenas.
pub fn in_cache_scope<T>(make: impl FnOnce() -> T) -> T {
    /// Restores the thread's flag however `make` ends (a scope within a scope keeps the outer one).
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            IN_CACHE_SCOPE.set(self.0);
        }
    }
    let _restore = Restore(IN_CACHE_SCOPE.replace(true));
    make()
}

/// Whether `ptr` lies in the cache's arena.
pub fn in_cache_arena(ptr: *const u8) -> bool {
    let start = CACHE_AREA.0.load(Ordering::Acquire);
    let len = CACHE_AREA.1.load(Ordering::Acquire);
    (ptr as usize).checked_sub(start).is_some_and(|offset| offset < len)
}

/// The cache's arena: `bytes` of address space (rounded up to 32 MiB, at least 64 MiB) advised
/// `MADV_HUGEPAGE`, where [`in_cache_scope`]s allocate. Made once, and only where huge pages can be confined to
/// it ([`configure`]) and the kernel does not count address space as memory (`vm.overcommit_memory` 2);
/// returns whether there is one. It costs no memory until the caches fill it, then 2
/// MiB at a time: what the registry cache holds lies in as few pages as its size allows, and the rest of the
/// process keeps its small pages.
pub fn reserve_cache_arena(bytes: usize) -> bool {
    static MADE: std::sync::Once = std::sync::Once::new();
    MADE.call_once(|| {
        #[cfg(target_os = "linux")]
        if linux::huge_pages_when_advised() && !linux::strict_overcommit() {
            linux::make_cache_arena(bytes);
        }
        let _ = bytes;
    });
    !CACHE_HEAP.load(Ordering::Acquire).is_null()
}

#[cfg(target_os = "linux")]
mod linux {
    use std::sync::atomic::Ordering;

    use libmimalloc_sys::{mi_arena_id_t, mi_heap_new_in_arena, mi_manage_os_memory_ex};

    use super::{CACHE_AREA, CACHE_HEAP};

    /// `PR_SET_THP_DISABLE`'s flag (Linux 6.18) that keeps huge pages for memory advised `MADV_HUGEPAGE`.
    const PR_THP_DISABLE_EXCEPT_ADVISED: libc::c_ulong = 1 << 1;
    /// The cache arena's alignment and granularity: a multiple of the huge page and of mimalloc's arena
    /// alignment.
    const ARENA_ALIGN: usize = 32 << 20;

    /// Huge pages off for the process except where advised (else off altogether), and the advice mimalloc
    /// gave its first arena before `main` taken back.
    pub(super) fn huge_pages_only_where_advised() {
        unadvise_huge_pages();
        let (off, unused): (libc::c_ulong, libc::c_ulong) = (1, 0);
        // SAFETY: PR_SET_THP_DISABLE reads its flag and its mode as unsigned longs, as passed, and no
        // pointers; it sets a flag of the process. A kernel before 6.18 refuses the mode (EINVAL), and then
        // huge pages go off altogether; where that fails too (before 3.15, a seccomp filter) they stay as
        // they were, which costs memory, not correctness.
        let except_advised =
            unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, off, PR_THP_DISABLE_EXCEPT_ADVISED, unused, unused) };
        if except_advised != 0 {
            // SAFETY: as above, without the mode.
            let _ = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, off, unused, unused, unused) };
        }
    }

    /// Whether memory advised `MADV_HUGEPAGE` may get huge pages: they are not off for the process (0), or
    /// off except where advised (`1 | PR_THP_DISABLE_EXCEPT_ADVISED`).
    pub(super) fn huge_pages_when_advised() -> bool {
        let unused: libc::c_ulong = 0;
        // SAFETY: PR_GET_THP_DISABLE takes no pointers and returns the process's setting.
        let setting = unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, unused, unused, unused, unused) };
        setting == 0 || setting == 1 | PR_THP_DISABLE_EXCEPT_ADVISED as libc::c_int
    }

    /// Whether the kernel counts every writable mapping against its commit limit (`vm.overcommit_memory`
    /// 2), `MAP_NORESERVE` or not: then the arena's address space would be charged as memory at once.
    pub(super) fn strict_overcommit() -> bool {
        std::fs::read_to_string("/proc/sys/vm/overcommit_memory").is_ok_and(|mode| mode.trim() == "2")
    }

    /// `MADV_NOHUGEPAGE` on every mapping advised `MADV_HUGEPAGE` so far (the `hg` flag of
    /// /proc/self/smaps): the arenas mimalloc made before `main`, with its huge pages still allowed.
    fn unadvise_huge_pages() {
        let Ok(smaps) = std::fs::read_to_string("/proc/self/smaps") else { return };
        let mut range = None;
        for line in smaps.lines() {
            if let Some(flags) = line.strip_prefix("VmFlags:") {
                if let Some((start, end)) = range.take()
                    && flags.split_whitespace().any(|flag| flag == "hg")
                {
                    // SAFETY: a whole mapping of this process, as /proc lists it; the advice changes only
                    // whether its pages may be huge, not its contents.
                    let _ = unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_NOHUGEPAGE) };
                }
            } else if let Some((start, end)) = line.split_whitespace().next().and_then(|span| span.split_once('-'))
                && let (Ok(start), Ok(end)) = (usize::from_str_radix(start, 16), usize::from_str_radix(end, 16))
            {
                range = Some((start, end));
            }
        }
    }

    /// Maps the arena (address space only), advises it, and gives it to mimalloc as an exclusive arena with a
    /// heap of its own. Anything refused leaves no arena: scoped allocations then go where others go.
    pub(super) fn make_cache_arena(bytes: usize) {
        let Some(size) = bytes.checked_next_multiple_of(ARENA_ALIGN).map(|size| size.max(2 * ARENA_ALIGN)) else {
            return;
        };
        let Some(mapped) = size.checked_add(ARENA_ALIGN) else { return };
        let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE;
        // SAFETY: a new anonymous mapping at an address the kernel picks; nothing else refers to it.
        let base =
            unsafe { libc::mmap(std::ptr::null_mut(), mapped, libc::PROT_READ | libc::PROT_WRITE, flags, -1, 0) };
        if base == libc::MAP_FAILED {
            return;
        }
        let base = base as usize;
        let start = base.next_multiple_of(ARENA_ALIGN);
        let (head, tail) = (start - base, base + mapped - (start + size));
        // SAFETY: the head and the tail of the mapping just made, around the aligned area, unused; and the
        // advice on the area changes only whether its pages may be huge.
        let advised = unsafe {
            (head == 0 || libc::munmap(base as *mut libc::c_void, head) == 0)
                && (tail == 0 || libc::munmap((start + size) as *mut libc::c_void, tail) == 0)
                && libc::madvise(start as *mut libc::c_void, size, libc::MADV_HUGEPAGE) == 0
        };
        let mut arena: mi_arena_id_t = std::ptr::null_mut();
        // SAFETY: the area is mapped readable and writable (committed on use, zero), aligned to mimalloc's
        // arena alignment and larger than its least arena; mimalloc owns it from now on and never unmaps it.
        let managed = advised
            && unsafe { mi_manage_os_memory_ex(start as *const _, size, true, false, true, -1, true, &mut arena) };
        if !managed {
            // SAFETY: the area mapped above, which nothing uses.
            let _ = unsafe { libc::munmap(start as *mut libc::c_void, size) };
            return;
        }
        // SAFETY: `arena` is the arena just made; the heap lives as long as the process.
        let heap = unsafe { mi_heap_new_in_arena(arena) };
        if !heap.is_null() {
            CACHE_AREA.0.store(start, Ordering::Release);
            CACHE_AREA.1.store(size, Ordering::Release);
            CACHE_HEAP.store(heap, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use libmimalloc_sys::mi_option_get;

    use super::*;

    #[test]
    fn the_option_indexes_name_the_options_meant() {
        // mimalloc's defaults (its src/options.c), unless the environment sets the option.
        for ((option, _, names), default) in OPTIONS.into_iter().zip([2, 1000, 1]) {
            if !set_by_environment(names) {
                // SAFETY: reading an option has no precondition.
                assert_eq!(unsafe { mi_option_get(option) }, default, "{}", names[0]);
            }
        }
    }
}
