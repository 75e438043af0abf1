//! Password checks on threads of their own: a few a second at normal priority, the rest (and
//! all of them while logins are under attack) under the kernel's idle scheduling policy.
//!
//! An argon2id check holds a core for tens of milliseconds. On the runtime's blocking pool it
//! competed with the data path as an equal: a flood of wrong passwords at the default budget
//! (50 checks a second) took both cores of the test machine and put a healthy client's round
//! trip p99 at 60-140x its quiet value (and the blocking pool grew to hundreds of threads, one
//! 19 MiB check each). Under `SCHED_IDLE` a check gives way at once to any thread that wakes
//! with work, so a flood's checks use only the CPU the data path leaves (1.1-1.9x in the same
//! runs). A person's login should not wait on a busy broker, so a few checks a second run at
//! normal priority while failures come no faster than a person mistypes
//! ([`tidings_auth::FloodWatch`]); the Guard decides. A thread cannot leave `SCHED_IDLE`
//! without privilege, hence two pools. Two threads each bound the checks running at once; the budget
//! (`verify_per_second`) bounds the queue.

use std::sync::mpsc;
use std::sync::Arc;

use parking_lot::Mutex;

/// A check to run: it sends its outcome itself.
type Job = Box<dyn FnOnce() + Send>;

/// Threads in each pool.
const THREADS: usize = 2;

/// The two pools of verification threads.
pub(super) struct Verifier {
    normal: mpsc::Sender<Job>,
    idle: mpsc::Sender<Job>,
}

/// Which pool a check runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Priority {
    /// Normal scheduling: no attack seen.
    Normal,
    /// `SCHED_IDLE`: logins are under attack.
    Idle,
}

impl Verifier {
    /// Starts both pools.
    pub(super) fn start() -> std::io::Result<Verifier> {
        Ok(Verifier { normal: pool(Priority::Normal)?, idle: pool(Priority::Idle)? })
    }

    /// Runs `check` on a thread of the `priority` pool; its outcome, or `None` if the pool is gone.
    pub(super) async fn run<T: Send + 'static>(
        &self,
        priority: Priority,
        check: impl FnOnce() -> T + Send + 'static,
    ) -> Option<T> {
        let (reply, outcome) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move || {
            let _ = reply.send(check());
        });
        let pool = match priority {
            Priority::Normal => &self.normal,
            Priority::Idle => &self.idle,
        };
        pool.send(job).ok()?;
        outcome.await.ok()
    }
}

/// Starts a pool's threads; they end when its sender (held by the [`Verifier`]) is dropped.
fn pool(priority: Priority) -> std::io::Result<mpsc::Sender<Job>> {
    let (jobs, queue) = mpsc::channel::<Job>();
    let queue = Arc::new(Mutex::new(queue));
    for n in 0..THREADS {
        let queue = Arc::clone(&queue);
        let name = format!("tidings-verify-{}{n}", if priority == Priority::Idle { "idle-" } else { "" });
        std::thread::Builder::new().name(name).spawn(move || {
            if priority == Priority::Idle {
                idle_policy();
            }
            loop {
                let job = queue.lock().recv();
                match job {
                    Ok(job) => job(),
                    Err(_) => return,
                }
            }
        })?;
    }
    Ok(jobs)
}

/// Puts the calling thread under `SCHED_IDLE` (lowering a policy needs no privilege). If the
/// kernel refuses, the checks run at normal priority and the budget alone bounds their cost.
fn idle_policy() {
    use thread_priority::{NormalThreadSchedulePolicy, ThreadPriority, ThreadSchedulePolicy};
    let idle = ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle);
    let me = thread_priority::thread_native_id();
    if let Err(e) = thread_priority::set_thread_priority_and_policy(me, ThreadPriority::Min, idle) {
        tracing::warn!(error = ?e, "password checks under attack run at normal priority: SCHED_IDLE refused");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use thread_priority::{NormalThreadSchedulePolicy, ThreadSchedulePolicy};

    #[tokio::test]
    async fn each_pool_runs_checks_under_its_policy_and_returns_their_outcomes() {
        let verifier = Verifier::start().unwrap();
        let idle = verifier.run(Priority::Idle, thread_priority::thread_schedule_policy).await.unwrap().unwrap();
        assert_eq!(idle, ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle));
        let normal = verifier.run(Priority::Normal, thread_priority::thread_schedule_policy).await.unwrap().unwrap();
        assert_eq!(normal, ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Other));
        let doubled = futures::future::join_all((0..20u64).map(|n| verifier.run(Priority::Idle, move || n * 2))).await;
        assert_eq!(doubled.into_iter().map(Option::unwrap).sum::<u64>(), (0..20).map(|n| n * 2).sum::<u64>());
    }
}
