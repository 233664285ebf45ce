//! The output budget: the bytes one request may have rendered, charged by the output writer and by every
//! filter that builds a new value.
//!
//! A render installs the request's [`Budget`] as the current thread's meter for its duration (a render is
//! synchronous and never nests, so concurrent renders on other threads each see their own); filters charge
//! it through [`charge`] and [`reserve`], which fail once the budget would be exceeded.

use std::cell::RefCell;

use minijinja::{Error, ErrorKind};

/// The bytes one request may have rendered: its output and every filter result, across all its renders
/// (all the messages of one prompt share one budget).
///
/// A budget may also be *quick*: its renders get [`super::QUICK_FUEL`] instead of [`super::FUEL`], so that
/// they can run on an async worker; one that runs out of that fuel is marked
/// ([`Budget::wants_more_fuel`]) and the caller renders again, from a fresh budget, on the blocking pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Budget {
    limit: usize,
    used: usize,
    /// Whether a render charging it was refused for want of bytes or of fuel.
    is_spent: bool,
    is_quick: bool,
    wants_more_fuel: bool,
}

impl Budget {
    /// A budget of `limit` bytes, none used yet.
    pub const fn new(limit: usize) -> Self {
        Self { limit, used: 0, is_spent: false, is_quick: false, wants_more_fuel: false }
    }

    /// Whether a render was refused because it would have exceeded this budget or run out of fuel: the
    /// template hit a render limit, rather than being wrong.
    pub const fn is_spent(&self) -> bool {
        self.is_spent
    }

    pub(super) fn spend(&mut self) {
        self.is_spent = true;
    }

    /// The default budget, for renders with [`super::QUICK_FUEL`].
    pub const fn quick() -> Self {
        Self { limit: super::BUDGET_BYTES, used: 0, is_spent: false, is_quick: true, wants_more_fuel: false }
    }

    pub(super) const fn is_quick(&self) -> bool {
        self.is_quick
    }

    /// Marks a quick budget whose render ran out of [`super::QUICK_FUEL`] (and nothing else).
    pub(super) fn ran_out_of_quick_fuel(&mut self) {
        self.wants_more_fuel = true;
    }

    /// Whether a render with this (quick) budget failed only for want of fuel: it has to be rendered again,
    /// with a [`Budget::default`], where [`super::FUEL`] may be spent.
    pub const fn wants_more_fuel(&self) -> bool {
        self.wants_more_fuel
    }

    /// The bytes this budget allows in all.
    pub const fn limit(&self) -> usize {
        self.limit
    }

    /// The bytes still available.
    pub const fn remaining(&self) -> usize {
        self.limit.saturating_sub(self.used)
    }

    /// Charges `bytes` of output rendered without MiniJinja; `None`, charging nothing, when they do not fit.
    pub(super) fn take(&mut self, bytes: usize) -> Option<()> {
        (bytes <= self.remaining()).then(|| self.used += bytes)
    }
}

impl Default for Budget {
    /// [`super::BUDGET_BYTES`]: what one `prompts/get` or one resource-template read may render.
    fn default() -> Self {
        Self::new(super::BUDGET_BYTES)
    }
}

/// The budget of the render running on this thread, and the first refusal it gave.
struct Meter {
    limit: usize,
    used: usize,
    exceeded: Option<String>,
}

thread_local! {
    static METER: RefCell<Option<Meter>> = const { RefCell::new(None) };
}

/// The current thread's meter while one render runs; dropping it writes the bytes used back to the budget.
pub(super) struct Scope<'b> {
    budget: &'b mut Budget,
    previous: Option<Meter>,
}

impl<'b> Scope<'b> {
    pub(super) fn enter(budget: &'b mut Budget) -> Self {
        let meter = Meter { limit: budget.limit, used: budget.used, exceeded: None };
        let previous = METER.with(|cell| cell.borrow_mut().replace(meter));
        Self { budget, previous }
    }

    /// The refusal that ended the render, if the budget ran out.
    pub(super) fn exceeded(&self) -> Option<String> {
        METER.with(|cell| cell.borrow().as_ref().and_then(|meter| meter.exceeded.clone()))
    }
}

impl Drop for Scope<'_> {
    fn drop(&mut self) {
        let meter = METER.with(|cell| std::mem::replace(&mut *cell.borrow_mut(), self.previous.take()));
        if let Some(meter) = meter {
            self.budget.used = meter.used;
        }
    }
}

/// Charges `bytes` that `what` (e.g. "the filter `join`") is about to produce; fails, naming `what`, when
/// they exceed what is left of the budget, or when no render is running on this thread.
pub(super) fn charge(what: &str, bytes: usize) -> Result<(), Error> {
    METER.with(|cell| {
        let mut slot = cell.borrow_mut();
        let Some(meter) = slot.as_mut() else {
            return Err(Error::new(ErrorKind::InvalidOperation, "templates are rendered only with an output budget"));
        };
        let left = meter.limit.saturating_sub(meter.used);
        if bytes > left {
            let message = format!(
                "{what} would exceed the output budget of {} bytes ({bytes} bytes needed, {left} left)",
                meter.limit
            );
            meter.exceeded.get_or_insert_with(|| message.clone());
            return Err(Error::new(ErrorKind::InvalidOperation, message));
        }
        meter.used += bytes;
        Ok(())
    })
}

/// Charges an upper bound of what a filter will build, before it builds it; [`settle`] then corrects the
/// charge to the size actually built.
pub(super) fn reserve(what: &str, bound: usize) -> Result<(), Error> {
    charge(what, bound)
}

/// Replaces the reservation `reserved` by the `actual` size built.
pub(super) fn settle(what: &str, reserved: usize, actual: usize) -> Result<(), Error> {
    if actual > reserved {
        return charge(what, actual - reserved);
    }
    METER.with(|cell| {
        if let Some(meter) = cell.borrow_mut().as_mut() {
            meter.used = meter.used.saturating_sub(reserved - actual);
        }
    });
    Ok(())
}
