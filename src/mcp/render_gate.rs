//! Turns for the renders that leave the request's task: an agent queues behind itself, not in front of
//! the others.
//!
//! A render that needs more than the quick fuel, and the compiling of a template text, run on tokio's
//! blocking pool, which has far more threads than the machine has cores. Without turns, one agent whose
//! clients all ask for its costliest templates at once would put as many threads as it has requests on the
//! cores, and every other agent's requests would wait for CPU behind them. So each such piece of work takes
//! a permit of its agent (`limits.max_renders_per_agent`) and then one of the gateway
//! (`limits.max_renders`, the number of cores by default): an agent's work beyond its own permits waits for
//! its own earlier work, and all of it together never occupies more threads than there are cores.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::FastMap;
use crate::domain::AgentId;

/// The permits of the gateway and of each agent that has work under way.
pub struct RenderGate {
    all: Arc<Semaphore>,
    /// Only agents with work under way or waiting have an entry: the last permit given back removes it.
    agents: FastMap<AgentId, Arc<Semaphore>>,
    per_agent: usize,
}

/// A turn: both permits, held while the work runs. Dropping it gives them back.
pub struct Turn<'a> {
    gate: &'a RenderGate,
    agent: AgentId,
    agent_permit: Option<OwnedSemaphorePermit>,
    _all: Option<OwnedSemaphorePermit>,
}

impl RenderGate {
    /// `per_agent` permits for each agent, `all` for every agent together (both at least 1).
    pub fn new(per_agent: usize, all: usize) -> Self {
        Self { all: Arc::new(Semaphore::new(all.max(1))), agents: FastMap::default(), per_agent: per_agent.max(1) }
    }

    /// Waits for `agent`'s turn: first a permit of its own, then one of the gateway's.
    pub async fn turn(&self, agent: &AgentId) -> Turn<'_> {
        let mine = Arc::clone(
            self.agents.entry(agent.clone()).or_insert_with(|| Arc::new(Semaphore::new(self.per_agent))).value(),
        );
        // Neither semaphore is ever closed, so acquiring cannot fail.
        let agent_permit = mine.acquire_owned().await.ok();
        let all = Arc::clone(&self.all).acquire_owned().await.ok();
        Turn { gate: self, agent: agent.clone(), agent_permit, _all: all }
    }

    /// Agents with work under way or waiting (for tests and metrics).
    pub fn busy_agents(&self) -> usize {
        self.agents.len()
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        drop(self.agent_permit.take());
        // The entry goes once nobody else holds or waits on the agent's semaphore: then the map's reference
        // is the only one, and every permit is back.
        self.gate.agents.remove_if(&self.agent, |_, semaphore| {
            Arc::strong_count(semaphore) == 1 && semaphore.available_permits() == self.gate.per_agent
        });
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn agent(id: &str) -> AgentId {
        AgentId::parse(id).expect("valid id")
    }

    #[tokio::test]
    async fn an_agent_waits_for_its_own_turn_not_for_others() {
        let gate = RenderGate::new(1, 2);
        let (a, b) = (agent("a"), agent("b"));
        let first = gate.turn(&a).await;
        // A's second piece of work waits for its first...
        let waiting = tokio::time::timeout(Duration::from_millis(50), gate.turn(&a)).await;
        assert!(waiting.is_err(), "a second turn of the same agent must wait");
        // ...while B gets a turn at once.
        let other = tokio::time::timeout(Duration::from_secs(5), gate.turn(&b)).await;
        assert!(other.is_ok(), "another agent must not wait behind A");
        drop(other);
        drop(first);
        assert!(tokio::time::timeout(Duration::from_secs(5), gate.turn(&a)).await.is_ok());
        assert_eq!(gate.busy_agents(), 0, "entries go with their last turn");
    }

    #[tokio::test]
    async fn the_gateway_bounds_every_agent_together() {
        let gate = RenderGate::new(1, 1);
        let first = gate.turn(&agent("a")).await;
        let waiting = tokio::time::timeout(Duration::from_millis(50), gate.turn(&agent("b"))).await;
        assert!(waiting.is_err(), "the gateway's single permit is taken");
        drop(first);
        assert!(tokio::time::timeout(Duration::from_secs(5), gate.turn(&agent("b"))).await.is_ok());
    }
}
