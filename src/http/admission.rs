//! The connection caps of one listener: `http.max_connections` in total and `http.max_connections_per_address`
//! per client address, checked when a connection is accepted, before its TLS handshake or any byte of it is
//! read. A connection over a cap is refused at once ([`Admission::admit`]); an admitted one holds a
//! [`Permit`] until it closes, which keeps the counts and the `hivegate_connections_open` gauge true.
//!
//! The address is the socket's peer: nothing the client sends is read yet. A peer in
//! `rate_limits.trusted_proxies` is a proxy speaking for many clients, so it is not capped per address (only
//! the total applies to it); the clients behind it are told apart per request ([`crate::guard::client_ip`]).
//!
//! [`Admission::admit`]: crate::http::admission::Admission::admit
//! [`Permit`]: crate::http::admission::Permit

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use ipnet::IpNet;
use prometheus_client::metrics::gauge::Gauge;

use crate::FastMap;
use crate::metrics::{ConnectionRefusedLabels, ListenerLabels, Metrics};

/// Which cap refused a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// `http.max_connections`.
    Total,
    /// `http.max_connections_per_address`.
    PerAddress,
}

impl Refusal {
    /// The metric label: the configuration key's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::Total => "max_connections",
            Refusal::PerAddress => "max_connections_per_address",
        }
    }
}

/// The counts of one listener's open connections.
pub struct Admission {
    /// `public` or `operator`: the metric label.
    listener: &'static str,
    /// 0: no cap.
    max_total: usize,
    /// 0: no cap.
    max_per_address: usize,
    trusted_proxies: Vec<IpNet>,
    /// Connections open (admitted and not yet closed). An atomic: connections open and close on every
    /// runtime thread, and the total is compared on every accept.
    open: AtomicUsize,
    /// Connections open per capped address; an address leaves the map with its last connection, so the map
    /// holds no more entries than there are connections.
    per_address: FastMap<IpAddr, usize>,
    gauge: Gauge,
    metrics: Arc<Metrics>,
}

impl Admission {
    pub fn new(
        listener: &'static str,
        max_total: u32,
        max_per_address: u32,
        trusted_proxies: Vec<IpNet>,
        metrics: Arc<Metrics>,
    ) -> Arc<Self> {
        let gauge = metrics.connections_open.get_or_create(&ListenerLabels { listener }).clone();
        Arc::new(Self {
            listener,
            max_total: max_total as usize,
            max_per_address: max_per_address as usize,
            trusted_proxies,
            open: AtomicUsize::new(0),
            per_address: FastMap::default(),
            gauge,
            metrics,
        })
    }

    /// The listener's metric label.
    pub fn listener(&self) -> &'static str {
        self.listener
    }

    /// Counts a new connection from `peer`, or refuses it (counted in `hivegate_connections_refused`) when
    /// the listener or the address is at its cap.
    pub fn admit(self: &Arc<Self>, peer: IpAddr) -> Result<Permit, Refusal> {
        let peer = peer.to_canonical();
        let open = self.open.fetch_add(1, Ordering::AcqRel) + 1;
        if self.max_total > 0 && open > self.max_total {
            self.open.fetch_sub(1, Ordering::AcqRel);
            return Err(self.refused(Refusal::Total));
        }
        let capped = self.max_per_address > 0 && !self.trusted_proxies.iter().any(|net| net.contains(&peer));
        if capped {
            let mut count = self.per_address.entry(peer).or_insert(0);
            if *count >= self.max_per_address {
                drop(count);
                self.open.fetch_sub(1, Ordering::AcqRel);
                return Err(self.refused(Refusal::PerAddress));
            }
            *count += 1;
        }
        self.gauge.inc();
        Ok(Permit { admission: self.clone(), address: capped.then_some(peer) })
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }

    fn refused(&self, refusal: Refusal) -> Refusal {
        let labels = ConnectionRefusedLabels { listener: self.listener, reason: refusal.as_str() };
        self.metrics.connections_refused.get_or_create(&labels).inc();
        refusal
    }

    fn release(&self, address: Option<IpAddr>) {
        if let Some(address) = address {
            // The entry goes once its count is 0; a concurrent admit of the same address either found it
            // before (and counted itself in) or makes a new one.
            self.per_address.remove_if_mut(&address, |_, count| {
                *count -= 1;
                *count == 0
            });
        }
        self.open.fetch_sub(1, Ordering::AcqRel);
        self.gauge.dec();
    }
}

/// One admitted connection: counted until it is dropped, when the connection closes.
pub struct Permit {
    admission: Arc<Admission>,
    /// The address it is counted under (`None` when not capped per address).
    address: Option<IpAddr>,
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.admission.release(self.address);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guard::client_ip::ip;

    #[test]
    fn caps_per_address_and_in_total() {
        let metrics = Arc::new(Metrics::new());
        let admission = Admission::new("public", 3, 2, vec!["10.0.0.0/8".parse().unwrap()], metrics);
        let a1 = admission.admit(ip("192.0.2.1")).expect("first");
        let a2 = admission.admit(ip("::ffff:192.0.2.1")).expect("second, the same address");
        assert_eq!(admission.admit(ip("192.0.2.1")).err(), Some(Refusal::PerAddress));
        let b = admission.admit(ip("192.0.2.2")).expect("another address");
        assert_eq!(admission.admit(ip("192.0.2.3")).err(), Some(Refusal::Total));
        assert_eq!(admission.open(), 3);
        drop(a1);
        let a3 = admission.admit(ip("192.0.2.1")).expect("a slot came free");
        drop((a2, a3, b));
        assert_eq!(admission.open(), 0);
        assert!(admission.per_address.is_empty(), "addresses leave with their last connection");
        // A trusted proxy is not capped per address, only in total.
        let proxied: Vec<_> = (0..3).map(|_| admission.admit(ip("10.1.2.3")).expect("proxy")).collect();
        assert_eq!(admission.admit(ip("10.1.2.3")).err(), Some(Refusal::Total));
        drop(proxied);
        assert_eq!(admission.open(), 0);
    }

    #[test]
    fn zero_is_no_cap() {
        let admission = Admission::new("public", 0, 0, Vec::new(), Arc::new(Metrics::new()));
        let permits: Vec<_> = (0..100).map(|_| admission.admit(ip("192.0.2.1")).expect("no cap")).collect();
        assert_eq!(admission.open(), 100);
        drop(permits);
        assert_eq!(admission.open(), 0);
    }
}
