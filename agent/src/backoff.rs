//! Per-key exponential back-off as kubelet's `flowcontrol.Backoff`: the
//! first restart waits `initial`, each next one twice as long up to `max`;
//! an entry untouched for `2 × max` (10 min with kubelet's 300 s) starts
//! over. Pure: the caller passes the time, as a duration since the Unix
//! epoch (CRI reports exits in wall-clock nanoseconds).

use std::collections::HashMap;
use std::time::Duration;

use crate::clock::Time;

#[derive(Debug, Clone, Copy)]
struct Entry {
    delay: Duration,
    last_update: Time,
}

/// Back-off state for many keys (container restarts, image pulls).
#[derive(Debug)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    entries: HashMap<String, Entry>,
}

impl Backoff {
    pub fn new(initial: Duration, max: Duration) -> Self {
        Self {
            initial,
            max,
            entries: HashMap::new(),
        }
    }

    fn expired(&self, e: &Entry, now: Time) -> bool {
        now.saturating_sub(e.last_update) > self.max * 2
    }

    /// Records one more failure of `key` at `now`: the delay doubles (or
    /// starts at `initial`, or starts over after a long quiet time).
    pub fn next(&mut self, key: &str, now: Time) {
        let delay = match self.entries.get(key) {
            Some(e) if !self.expired(e, now) => (e.delay * 2).min(self.max),
            _ => self.initial,
        };
        self.entries.insert(
            key.to_string(),
            Entry {
                delay,
                last_update: now,
            },
        );
    }

    /// After an agent restart the table is empty, but the runtime still
    /// knows the container: its `restart_count`-th run (restart_count ≥ 1)
    /// was started after `restart_count` calls of [`Backoff::next`], the
    /// last at about `started` (its start time). Rebuilds that entry when
    /// there is none, so the next restart waits as it would have without
    /// the agent's restart (kubelet keeps the same state in memory only, so
    /// it loses it too; a restart must not reset it).
    pub fn seed(&mut self, key: &str, restart_count: u32, started: Time) {
        if restart_count == 0 || self.entries.contains_key(key) {
            return;
        }
        let doublings = (restart_count - 1).min(31);
        let delay = self
            .initial
            .checked_mul(1u32 << doublings)
            .unwrap_or(self.max)
            .min(self.max);
        self.entries.insert(
            key.to_string(),
            Entry {
                delay,
                last_update: started,
            },
        );
    }

    /// How long `key` must still wait, counted from `since` (when the
    /// container last finished); `None` when it may go now.
    pub fn remaining(&self, key: &str, since: Time, now: Time) -> Option<Duration> {
        let e = self.entries.get(key)?;
        if self.expired(e, now) {
            return None;
        }
        let waited = now.saturating_sub(since);
        e.delay.checked_sub(waited).filter(|d| !d.is_zero())
    }

    /// How long `key` must still wait counted from its last failure
    /// (kubelet's `IsInBackOffSinceUpdate`, used for image pulls).
    pub fn remaining_since_update(&self, key: &str, now: Time) -> Option<Duration> {
        let e = self.entries.get(key)?;
        self.remaining(key, e.last_update, now)
    }

    /// The current delay of `key` (for messages).
    pub fn delay(&self, key: &str) -> Option<Duration> {
        self.entries.get(key).map(|e| e.delay)
    }

    /// Forgets keys not touched for `2 × max`.
    pub fn gc(&mut self, now: Time) {
        let max2 = self.max * 2;
        self.entries
            .retain(|_, e| now.saturating_sub(e.last_update) <= max2);
    }

    /// Forgets every key starting with `prefix` (a pod that is gone).
    pub fn forget_prefix(&mut self, prefix: &str) {
        self.entries.retain(|k, _| !k.starts_with(prefix));
    }
}

/// `10s`, `5m0s` as kubelet prints back-off delays.
pub fn humantime(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 60 {
        format!("{}m{}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn a_seed_from_the_runtime_gives_the_delay_the_lost_entry_had() {
        let t0 = Time::from_secs(1_000_000);
        // The live table after four restarts, each run lasting 1 s.
        let mut live = Backoff::new(10 * S, 300 * S);
        let mut now = t0;
        for _ in 0..4 {
            live.next("c", now);
            now += live.delay("c").expect("entry") + S;
        }
        // An agent restart: only the 4th run's start time is known.
        let started = now - S;
        let mut seeded = Backoff::new(10 * S, 300 * S);
        seeded.seed("c", 4, started);
        assert_eq!(seeded.delay("c"), live.delay("c"));
        assert_eq!(seeded.delay("c"), Some(80 * S));
        assert_eq!(seeded.remaining("c", now, now + S), Some(79 * S));
        // An entry in memory wins; no restarts yet: nothing to wait for.
        seeded.seed("c", 9, started);
        assert_eq!(seeded.delay("c"), Some(80 * S));
        seeded.seed("d", 0, started);
        assert_eq!(seeded.delay("d"), None);
        seeded.seed("e", 40, started);
        assert_eq!(seeded.delay("e"), Some(300 * S), "capped");
    }

    #[test]
    fn doubles_to_the_cap() {
        let t0 = Time::from_secs(1_000_000);
        let mut b = Backoff::new(10 * S, 300 * S);
        let mut now = t0;
        let mut seen = Vec::new();
        for _ in 0..8 {
            b.next("c", now);
            seen.push(b.delay("c").expect("entry").as_secs());
            now += b.delay("c").expect("entry");
        }
        assert_eq!(seen, [10, 20, 40, 80, 160, 300, 300, 300]);
    }

    #[test]
    fn remaining_counts_from_the_exit() {
        let t0 = Time::from_secs(1_000_000);
        let mut b = Backoff::new(10 * S, 300 * S);
        assert_eq!(b.remaining("c", t0, t0), None, "no entry: go");
        b.next("c", t0);
        assert_eq!(b.remaining("c", t0, t0 + 4 * S), Some(6 * S));
        assert_eq!(b.remaining("c", t0, t0 + 10 * S), None);
        assert_eq!(b.remaining("other", t0, t0), None);
    }

    #[test]
    fn resets_after_ten_quiet_minutes() {
        let t0 = Time::from_secs(1_000_000);
        let mut b = Backoff::new(10 * S, 300 * S);
        b.next("c", t0);
        b.next("c", t0 + S);
        assert_eq!(b.delay("c"), Some(20 * S));
        // Running for more than 2 × max: the next crash starts at 10 s.
        let later = t0 + S + 601 * S;
        assert_eq!(b.remaining("c", later, later), None);
        b.next("c", later);
        assert_eq!(b.delay("c"), Some(10 * S));
        b.gc(later + 700 * S);
        assert_eq!(b.delay("c"), None);
    }

    #[test]
    fn forget_a_pod() {
        let t0 = Time::from_secs(1_000_000);
        let mut b = Backoff::new(S, 2 * S);
        b.next("uid1/a", t0);
        b.next("uid2/a", t0);
        b.forget_prefix("uid1/");
        assert_eq!(b.delay("uid1/a"), None);
        assert!(b.delay("uid2/a").is_some());
    }
}
