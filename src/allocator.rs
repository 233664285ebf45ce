//! mimalloc, the allocator of the `hivegate` binary (its `#[global_allocator]` is in `src/main.rs`): the
//! options hivegate gives it at start-up, and the thread that returns freed memory to the system.
//!
//! mimalloc's options by their index in `mi_option_t` (mimalloc v3, as `libmimalloc-sys` 0.1.49 builds it;
//! the crate exports no constants for these). A test checks that each index still holds the option's
//! default.

use std::time::Duration;

use libmimalloc_sys::{mi_collect, mi_option_set, mi_option_t};

/// Whether arenas commit their memory at once (default 2: on systems that overcommit).
pub const ARENA_EAGER_COMMIT: mi_option_t = 4;
/// How long freed memory waits before it is returned to the system, in milliseconds (default 1000).
pub const PURGE_DELAY: mi_option_t = 15;
/// Whether mimalloc asks for transparent huge pages (default 1).
pub const ALLOW_THP: mi_option_t = 43;

/// How often the purger returns the freed memory whose delay has passed.
const PURGE_EVERY: Duration = Duration::from_millis(250);

/// No transparent huge pages, and arenas made from now on commit memory only when it is used, so that
/// idle connections and streams cost about what they hold. mimalloc asks the kernel for huge pages on its
/// arenas, and a 2 MiB page is resident as a whole once any of it is written: with them, the memory of
/// an idle SSE stream doubled (about 40 KiB instead of 20, bench/README.md), and the request path ran no
/// faster with them. The arena mimalloc made before `main` has asked for huge pages already, so the
/// process turns them off for itself (`PR_SET_THP_DISABLE`, what `MIMALLOC_ALLOW_THP=0` does when
/// mimalloc starts): from then on no page becomes huge, in the memory already mapped too (the few made
/// before `main` stay). An option the environment sets keeps the environment's value, which mimalloc has
/// already read (and acted on).
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
        let (off, unused): (libc::c_ulong, libc::c_ulong) = (1, 0);
        // SAFETY: PR_SET_THP_DISABLE reads its flag and the unused arguments as unsigned longs, as passed,
        // and no pointers; it sets a flag of the process. Where it fails (kernels before 3.15, a seccomp
        // filter) huge pages stay as they were, which costs memory, not correctness.
        let _ = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, off, unused, unused, unused) };
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
