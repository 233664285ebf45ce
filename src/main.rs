use std::process::ExitCode;

use clap::Parser;
use hivegate::app::{self, Application};
use hivegate::cli::{AdminTokenCommand, AuditCommand, Cli, Command, ConfigCommand, Target};
use hivegate::client::AdminClient;
use hivegate::config::Config;

/// mimalloc rather than the system allocator: every request allocates and frees many small buffers, and
/// glibc's allocator spent a tenth of the request path's time in `malloc`/`free` (bench/README.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's options by their index in `mi_option_t` (mimalloc v3, as `libmimalloc-sys` 0.1.49 builds it;
/// the crate exports no constants for these). A test checks that each index still holds the option's
/// default.
mod allocator {
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

    /// A thread that asks mimalloc every [`PURGE_EVERY`] to return the freed memory whose delay has passed
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
        (PURGE_DELAY, None, &["MIMALLOC_PURGE_DELAY", "MIMALLOC_RESET_DELAY"]),
        (ALLOW_THP, Some(0), ALLOW_THP_VARIABLES),
    ];

    /// The environment variable that chooses [`ALLOW_THP`] (it has no older name).
    const ALLOW_THP_VARIABLES: &[&str] = &["MIMALLOC_ALLOW_THP"];

    fn set_by_environment(names: &[&str]) -> bool {
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

        /// The process's resident memory in KiB.
        fn rss_kib() -> u64 {
            let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
            let line = status.lines().find_map(|line| line.strip_prefix("VmRSS:")).expect("VmRSS");
            line.trim().trim_end_matches("kB").trim().parse().expect("VmRSS in kB")
        }

        #[test]
        #[cfg(target_os = "linux")]
        fn memory_freed_by_a_thread_that_went_quiet_goes_back_to_the_system() {
            if set_by_environment(OPTIONS[1].2) {
                return; // the environment chose the purge delay; the default's behaviour is what is tested
            }
            start_purger().expect("purge thread");
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
}

#[tokio::main]
async fn main() -> ExitCode {
    allocator::configure();
    let cli = Cli::parse();
    let loaded = match Config::load_with_sources(cli.config.as_deref()) {
        Ok(loaded) => loaded,
        Err(error) => {
            eprintln!("hivegate: {error}");
            return ExitCode::from(2);
        }
    };
    if let Command::Config { command: ConfigCommand::Check } = cli.command {
        return config_check(&loaded);
    }
    let config = loaded.config;
    // Only the server exports traces; the one-shot commands (the container's healthcheck among them) log.
    let exports = matches!(cli.command, Command::Serve).then_some(&config.telemetry);
    let telemetry = match hivegate::telemetry::init(&config.log, exports) {
        Ok(telemetry) => telemetry,
        Err(error) => {
            eprintln!("hivegate: {error:#}");
            return ExitCode::from(2);
        }
    };
    let outcome = match cli.command {
        Command::Serve => serve(config).await,
        Command::Migrate => app::migrate_only(&config).await,
        Command::Healthcheck => app::healthcheck(&config).await,
        Command::AdminToken { command: AdminTokenCommand::Rotate } => {
            async {
                app::require_existing_database(&config)?;
                app::rotate_operator_token(&config).await
            }
            .await
        }
        Command::Audit { command: AuditCommand::Verify { agent } } => {
            async {
                app::require_existing_database(&config)?;
                app::verify_audit(&config, agent.as_deref()).await
            }
            .await
        }
        Command::Audit { command: AuditCommand::Tail { target, agent, method, lines, follow, interval_ms } } => {
            let client = match admin_client(&config, target) {
                Ok(client) => client,
                Err(error) => return fail(&error),
            };
            let mut filter = Vec::new();
            filter.extend(agent.as_deref().map(|agent| ("agent", agent)));
            filter.extend(method.as_deref().map(|method| ("method", method)));
            let follow = follow.then(|| std::time::Duration::from_millis(interval_ms));
            client.audit_tail(&filter, lines, follow).await
        }
        Command::Agent { target, command } => {
            admin(&config, target, |client| async move { client.agent(command).await }).await
        }
        Command::Key { target, command } => {
            admin(&config, target, |client| async move { client.key(command).await }).await
        }
        Command::Resource { target, command } => {
            admin(&config, target, |client| async move { client.resource(command).await }).await
        }
        Command::Template { target, command } => {
            admin(&config, target, |client| async move { client.template(command).await }).await
        }
        Command::Prompt { target, command } => {
            admin(&config, target, |client| async move { client.prompt(command).await }).await
        }
        Command::Config { command: ConfigCommand::Check } => Ok(()),
    };
    let code = match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => fail(&error),
    };
    // Last, so that the spans of the drained requests are exported; the exporter blocks while it flushes.
    let _ = tokio::task::spawn_blocking(move || telemetry.shutdown()).await;
    code
}

/// The gateway, until it is stopped.
async fn serve(config: Config) -> anyhow::Result<()> {
    use anyhow::Context as _;
    allocator::start_purger().context("starting the allocator's purge thread")?;
    Application::build(config).await?.run_until_stopped().await
}

/// Reports a failed command on stderr, once and plain (it is not also logged), and gives its exit status.
fn fail(error: &anyhow::Error) -> ExitCode {
    eprintln!("hivegate: {error:#}");
    ExitCode::FAILURE
}

/// `hivegate config check`: the loaded configuration (already validated) as TOML with its sources. A closed
/// stdout (`| head -1`) ends it quietly.
fn config_check(loaded: &hivegate::config::Loaded) -> ExitCode {
    use std::io::Write as _;
    let text = match hivegate::config_report::render(loaded) {
        Ok(text) => text,
        Err(error) => return fail(&error),
    };
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(error) => fail(&anyhow::Error::new(error).context("writing to stdout")),
    }
}

/// The admin API client for the gateway `target` names.
fn admin_client(config: &Config, target: Target) -> anyhow::Result<AdminClient> {
    use secrecy::ExposeSecret;
    let token = target
        .token
        .or_else(|| config.admin_token.as_ref().map(|token| token.expose_secret().to_owned()))
        .ok_or_else(|| anyhow::anyhow!("no operator token: pass --token or set HIVEGATE_ADMIN_TOKEN"))?;
    let url = target.url.unwrap_or_else(|| app::admin_url(config));
    AdminClient::new(&url, &token, &config.limits)
}

/// Runs one admin API command against the gateway `target` names and prints its answer.
async fn admin<F, Fut>(config: &Config, target: Target, command: F) -> anyhow::Result<()>
where
    F: FnOnce(AdminClient) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<serde_json::Value>>,
{
    use std::io::Write as _;
    let answer = command(admin_client(config, target)?).await?;
    if !answer.is_null() {
        let mut text = serde_json::to_string_pretty(&answer)?;
        text.push('\n');
        match std::io::stdout().lock().write_all(text.as_bytes()) {
            Err(error) if error.kind() != std::io::ErrorKind::BrokenPipe => {
                return Err(anyhow::Error::new(error).context("writing to stdout"));
            }
            _ => {}
        }
    }
    Ok(())
}
