//! Registry views: pagination cursors and the per-agent caches in front of the store.

/// Per-agent caches of agent rows, list pages and small contents, invalidated through the event bus.
pub mod cache;
/// The three registry collections (resources, templates, prompts), each described once.
pub mod collection;
/// Opaque, authenticated pagination cursors.
pub mod cursor;
