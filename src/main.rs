//! The `hivegate` binary: mimalloc as the allocator ([`hivegate::allocator`]), then the command line
//! ([`hivegate::commands::run`]).

use std::process::ExitCode;

use clap::Parser;

/// mimalloc rather than the system allocator: every request allocates and frees many small buffers, and
/// glibc's allocator spent a tenth of the request path's time in `malloc`/`free` (bench/README.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> ExitCode {
    hivegate::allocator::configure();
    hivegate::commands::run(hivegate::cli::Cli::parse()).await
}

/// The allocator as the binary has it: mimalloc's purger returning what a quiet thread freed.
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
}
