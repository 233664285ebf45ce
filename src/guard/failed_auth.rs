//! Failed authentications per client address: after `attempts` answers 401 to one client within `window`,
//! its requests are refused (429) until the window ends, before any key is looked up.
//!
//! The window starts at the client's first failure and does not slide: a client can try at most `attempts`
//! credentials per window. IPv6 clients are counted per /64, the block one subscriber usually holds, so a
//! client cannot escape the count by changing its address within its own network.

use std::net::{IpAddr, Ipv6Addr};
use std::time::{Duration, Instant};

use crate::FastMap;

/// A client's failures in its current window.
struct Strikes {
    since: Instant,
    count: u32,
}

/// Counts 401 answers per client address.
pub struct FailedAuth {
    attempts: u32,
    window: Duration,
    clients: FastMap<IpAddr, Strikes>,
}

impl FailedAuth {
    /// `attempts` 0 turns the check off.
    pub fn new(attempts: u32, window: Duration) -> Self {
        Self { attempts, window, clients: FastMap::default() }
    }

    pub fn is_enabled(&self) -> bool {
        self.attempts > 0 && !self.window.is_zero()
    }

    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    pub fn window(&self) -> Duration {
        self.window
    }

    /// How long `client` must still wait, when it has used up its failures.
    pub fn blocked(&self, client: IpAddr) -> Option<Duration> {
        if !self.is_enabled() {
            return None;
        }
        let strikes = self.clients.get(&bucket_of(client))?;
        let elapsed = strikes.since.elapsed();
        (strikes.count >= self.attempts && elapsed < self.window).then(|| self.window - elapsed)
    }

    /// Notes one failed authentication of `client`; returns the count within its window when this one
    /// locks it out (the count reached `attempts` just now), so that the lockout is logged once.
    pub fn record(&self, client: IpAddr) -> Option<u32> {
        if !self.is_enabled() {
            return None;
        }
        let now = Instant::now();
        let mut strikes = self.clients.entry(bucket_of(client)).or_insert(Strikes { since: now, count: 0 });
        if now.duration_since(strikes.since) >= self.window {
            *strikes = Strikes { since: now, count: 0 };
        }
        strikes.count = strikes.count.saturating_add(1);
        (strikes.count == self.attempts).then_some(strikes.count)
    }

    /// Forgets the clients whose window has ended; returns how many are left.
    pub fn reclaim(&self) -> usize {
        self.clients.retain(|_, strikes| strikes.since.elapsed() < self.window);
        self.clients.shrink_to_fit();
        self.clients.len()
    }
}

/// The address failures are counted under: an IPv4 address itself, an IPv6 address's /64.
fn bucket_of(client: IpAddr) -> IpAddr {
    match client.to_canonical() {
        IpAddr::V6(v6) => {
            let mut segments = v6.segments();
            segments[4..].fill(0);
            IpAddr::V6(Ipv6Addr::from(segments))
        }
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guard::client_ip::ip;

    #[test]
    fn blocks_after_the_attempts_until_the_window_ends() {
        let failures = FailedAuth::new(3, Duration::from_secs(60));
        let client = ip("192.0.2.1");
        for _ in 0..2 {
            assert_eq!(failures.record(client), None);
        }
        assert_eq!(failures.blocked(client), None, "two failures of three");
        assert_eq!(failures.record(client), Some(3), "the third locks it out");
        assert_eq!(failures.record(client), None, "and is reported once");
        let wait = failures.blocked(client).expect("blocked after three");
        assert!(wait > Duration::from_secs(59) && wait <= Duration::from_secs(60), "{wait:?}");
        assert_eq!(failures.blocked(ip("192.0.2.2")), None, "other clients are not");
    }

    #[test]
    fn a_new_window_starts_over() {
        let failures = FailedAuth::new(1, Duration::from_millis(20));
        let client = ip("192.0.2.1");
        failures.record(client);
        assert!(failures.blocked(client).is_some());
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(failures.blocked(client), None);
        assert_eq!(failures.reclaim(), 0, "an ended window is forgotten");
    }

    #[test]
    fn ipv6_clients_count_per_64() {
        let failures = FailedAuth::new(2, Duration::from_secs(60));
        failures.record(ip("2001:db8:1:2::1"));
        failures.record(ip("2001:db8:1:2:ffff::9"));
        assert!(failures.blocked(ip("2001:db8:1:2::77")).is_some());
        assert_eq!(failures.blocked(ip("2001:db8:1:3::1")), None);
    }

    #[test]
    fn zero_attempts_turn_it_off() {
        let failures = FailedAuth::new(0, Duration::from_secs(60));
        failures.record(ip("192.0.2.1"));
        assert_eq!(failures.blocked(ip("192.0.2.1")), None);
    }
}
