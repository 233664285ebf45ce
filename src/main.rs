//! The `hivegate` binary: mimalloc as the allocator ([`hivegate::allocator`]), then the command line
//! ([`hivegate::commands::run`]).

use std::process::ExitCode;

use clap::Parser;

/// mimalloc rather than the system allocator: every request allocates and frees many small buffers, and
/// glibc's allocator spent a tenth of the request path's time in `malloc`/`free` (bench/README.md). What the
/// caches keep goes to an arena of huge pages of its own ([`hivegate::allocator::Allocator`]).
#[global_allocator]
static GLOBAL: hivegate::allocator::Allocator = hivegate::allocator::Allocator;

/// The allocator is configured before the runtime starts its threads, so that none of them allocates with
/// mimalloc's options as they were before.
fn main() -> ExitCode {
    hivegate::allocator::configure();
    match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime.block_on(hivegate::commands::run(hivegate::cli::Cli::parse())),
        Err(error) => {
            eprintln!("hivegate: starting the runtime: {error}");
            ExitCode::FAILURE
        }
    }
}

/// The allocator as the binary has it: mimalloc's purger returning what a quiet thread freed, and the
/// caches' arena of huge pages.
#[cfg(test)]
mod tests {
    use std::time::Duration;

    use hivegate::allocator;

    /// The process's resident memory in KiB.
    fn rss_kib() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
        let line = status.lines().find_map(|line| line.strip_prefix("VmRSS:")).expect("VmRSS");
        line.trim().trim_end_matches("kB").trim().parse().expect("VmRSS in kB")
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn memory_freed_by_a_thread_that_went_quiet_goes_back_to_the_system() {
        if allocator::set_by_environment(allocator::PURGE_DELAY_VARIABLES) {
            return; // the environment chose the purge delay; the default's behaviour is what is tested
        }
        allocator::start_purger().expect("purge thread");
        let before = rss_kib();
        // 256 MiB in 4 KiB blocks, written so that they are resident, freed by a thread that then exits:
        // nothing allocates afterwards, so only the purger can return them.
        let peak = std::thread::spawn(|| {
            let blocks: Vec<Vec<u8>> = (0..65_536).map(|i| vec![i as u8 | 1; 4096]).collect();
            let peak = rss_kib();
            assert!(blocks.iter().all(|block| block[4095] != 0));
            peak
        })
        .join()
        .expect("allocating thread");
        assert!(peak >= before + 200 * 1024, "resident memory {peak} KiB with the blocks, {before} KiB before");
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let now = rss_kib();
            if now < before + 64 * 1024 {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "resident memory {now} KiB, {before} KiB before 256 MiB were allocated and freed"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The mappings of this process as /proc/self/smaps lists them: start, end, their `VmFlags` and their
    /// `AnonHugePages` in KiB.
    #[cfg(target_os = "linux")]
    fn mappings() -> Vec<(usize, usize, String, u64)> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").expect("/proc/self/smaps");
        let mut mappings: Vec<(usize, usize, String, u64)> = Vec::new();
        for line in smaps.lines() {
            let first = line.split_whitespace().next().unwrap_or_default();
            if let Some((start, end)) = first.split_once('-')
                && let (Ok(start), Ok(end)) = (usize::from_str_radix(start, 16), usize::from_str_radix(end, 16))
            {
                mappings.push((start, end, String::new(), 0));
            } else if let Some(last) = mappings.last_mut() {
                if let Some(flags) = line.strip_prefix("VmFlags:") {
                    last.2 = flags.trim().to_owned();
                } else if let Some(huge) = line.strip_prefix("AnonHugePages:") {
                    last.3 = huge.trim().trim_end_matches("kB").trim().parse().expect("AnonHugePages in kB");
                }
            }
        }
        mappings
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn a_cache_scope_allocates_in_an_arena_of_huge_pages_of_its_own() {
        // `allocator::configure` is left to the binary: it would change mimalloc's options for the other
        // test of this process. Unconfigured, huge pages are as the environment has them.
        if !allocator::reserve_cache_arena(64 << 20) {
            // No arena where huge pages are off for the process or address space counts as memory.
            eprintln!("skipped: no cache arena in this process");
            return;
        }
        let outside = vec![1u8; 1000];
        let inside = allocator::in_cache_scope(|| vec![2u8; 1000]);
        assert!(!allocator::in_cache_arena(outside.as_ptr()));
        assert!(allocator::in_cache_arena(inside.as_ptr()));
        // Grown outside the scope, a value is moved by mimalloc as usual, and stays whole.
        let mut kept = allocator::in_cache_scope(|| String::from("kept"));
        assert!(allocator::in_cache_arena(kept.as_ptr()));
        kept.push_str(" and grown");
        assert_eq!(kept, "kept and grown");
        // A scope within a scope keeps the outer one's: the outer scope goes on in the arena after it.
        let (inner, after) = allocator::in_cache_scope(|| (allocator::in_cache_scope(|| vec![5u8; 64]), vec![6u8; 64]));
        assert!(allocator::in_cache_arena(inner.as_ptr()) && allocator::in_cache_arena(after.as_ptr()));
        assert!(!allocator::in_cache_arena(vec![7u8; 64].as_ptr()), "the scope ended with its closure");
        // Zeroed and grown within a scope: in the arena, whole.
        let grown = allocator::in_cache_scope(|| {
            let mut bytes = vec![0u8; 100];
            bytes.resize(300_000, 3);
            bytes
        });
        assert!(allocator::in_cache_arena(grown.as_ptr()) && grown[299_999] == 3 && grown[0] == 0);

        // The arena's mapping is advised for huge pages (whether the kernel finds free ones is its own).
        let written = allocator::in_cache_scope(|| vec![4u8; 4 << 20]);
        assert!(allocator::in_cache_arena(written.as_ptr()) && written.iter().all(|&byte| byte == 4));
        let mappings = mappings();
        let arena = mappings.iter().find(|(start, end, ..)| (*start..*end).contains(&(written.as_ptr() as usize)));
        let (_, _, flags, huge_kib) = arena.expect("the arena's mapping");
        assert!(flags.split_whitespace().any(|flag| flag == "hg"), "the arena is advised MADV_HUGEPAGE: {flags}");
        eprintln!("4 MiB written in the arena, {huge_kib} KiB of it in huge pages");

        // More than the arena holds goes elsewhere, and from then on scoped allocations go elsewhere too,
        // without asking the full arena, until the cache frees some of what it kept.
        let beyond: Vec<u8> = allocator::in_cache_scope(|| Vec::with_capacity(96 << 20));
        assert!(!allocator::in_cache_arena(beyond.as_ptr()));
        assert!(!allocator::in_cache_arena(allocator::in_cache_scope(|| vec![8u8; 64]).as_ptr()));
        allocator::cache_arena_freed();
        assert!(allocator::in_cache_arena(allocator::in_cache_scope(|| vec![9u8; 64]).as_ptr()));
    }
}
