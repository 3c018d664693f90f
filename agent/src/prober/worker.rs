//! One probe worker, kubelet's `worker.go`: the loop's timing (initial
//! delay, period, timeout backstop) and thresholds around a probe call.
//! Generic over the call and on tokio's clock, so it is unit-tested with
//! paused time.

use std::future::Future;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::probe::{Kind, Outcome, Params, Report, Run};

/// One probe worker for one container instance. `since_start` is how long
/// the container has been running; the first probe waits for the rest of
/// the initial delay or `jitter`, whichever is longer; `started` gates liveness and readiness
/// until the startup probe has succeeded (`None`: no startup probe).
/// Returns when a liveness or startup probe failed (the container is going
/// to be killed) or a startup probe succeeded (it is not probed again).
pub async fn run_loop<F, Fut>(
    kind: Kind,
    params: Params,
    since_start: Duration,
    jitter: Duration,
    mut started: Option<watch::Receiver<bool>>,
    mut probe: F,
    mut report: impl FnMut(Report),
) where
    F: FnMut(Duration) -> Fut,
    Fut: Future<Output = Outcome>,
{
    tokio::time::sleep(params.initial_delay.saturating_sub(since_start).max(jitter)).await;
    if let Some(rx) = started.as_mut()
        && rx.wait_for(|s| *s).await.is_err()
    {
        return;
    }
    let mut run = Run::default();
    loop {
        let began = Instant::now();
        let next = began + params.period;
        let outcome = match tokio::time::timeout(
            params.timeout + Duration::from_secs(1),
            probe(params.timeout),
        )
        .await
        {
            Ok(o) => o,
            // The handler enforces the timeout; this is the backstop.
            Err(_) => Outcome::Failure(format!("probe timed out after {:?}", params.timeout)),
        };
        let success = match &outcome {
            Outcome::Success | Outcome::Warning(_) => Some(true),
            Outcome::Failure(_) => Some(false),
            Outcome::Error(_) => None,
        };
        report(Report::Probed(outcome, began.elapsed()));
        if let Some(success) = success
            && let Some(result) = run.record(success, &params)
        {
            report(Report::Result(result));
            match (kind, result) {
                (Kind::Liveness | Kind::Startup, false) | (Kind::Startup, true) => return,
                _ => {}
            }
        }
        tokio::time::sleep_until(next).await;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::probe::tests::params;

    /// Runs the loop with scripted outcomes; returns (seconds since start
    /// of each probe, the results set with their times).
    async fn script(
        kind: Kind,
        p: Params,
        since_start: u64,
        jitter: u64,
        started: Option<watch::Receiver<bool>>,
        outcomes: Vec<Outcome>,
        limit: u64,
    ) -> (Vec<u64>, Vec<(u64, bool)>) {
        let t0 = Instant::now();
        let calls = Arc::new(Mutex::new(Vec::new()));
        let mut results = Vec::new();
        let probe = {
            let calls = calls.clone();
            move |_timeout| {
                let mut c = calls.lock().expect("calls");
                c.push(t0.elapsed().as_secs());
                let o = outcomes
                    .get(c.len() - 1)
                    .cloned()
                    .unwrap_or(Outcome::Success);
                async move { o }
            }
        };
        let fut = run_loop(
            kind,
            p,
            Duration::from_secs(since_start),
            Duration::from_secs(jitter),
            started,
            probe,
            |r| {
                if let Report::Result(v) = r {
                    results.push((t0.elapsed().as_secs(), v));
                }
            },
        );
        // Half a second before `limit`: no tie with a probe due then.
        let _ = tokio::time::timeout(Duration::from_millis(limit * 1000 - 500), fut).await;
        let c = calls.lock().expect("calls").clone();
        (c, results)
    }

    fn fail() -> Outcome {
        Outcome::Failure("boom".into())
    }

    #[tokio::test(start_paused = true)]
    async fn liveness_fails_after_the_threshold_and_stops() {
        let (calls, results) = script(
            Kind::Liveness,
            params(5, 10, 1, 3),
            0,
            0,
            None,
            vec![Outcome::Success, fail(), fail(), fail(), fail()],
            100,
        )
        .await;
        // First probe right after the initial delay, then every period.
        assert_eq!(calls, [5, 15, 25, 35]);
        assert_eq!(results, [(5, true), (35, false)]);
    }

    #[tokio::test(start_paused = true)]
    async fn initial_delay_counts_from_the_container_start() {
        let (calls, _) = script(Kind::Liveness, params(5, 10, 1, 3), 3, 0, None, vec![], 25).await;
        assert_eq!(calls, [2, 12, 22]);
        let (calls, _) = script(Kind::Liveness, params(5, 10, 1, 3), 60, 0, None, vec![], 15).await;
        assert_eq!(calls, [0, 10]);
    }

    #[tokio::test(start_paused = true)]
    async fn readiness_flips_both_ways_and_errors_do_not_count() {
        let (_, results) = script(
            Kind::Readiness,
            params(0, 1, 2, 2),
            0,
            0,
            None,
            vec![
                Outcome::Success,
                Outcome::Warning("redirect".into()),
                fail(),
                Outcome::Error("runtime".into()),
                fail(),
                Outcome::Success,
                Outcome::Success,
            ],
            7,
        )
        .await;
        assert_eq!(results, [(1, true), (4, false), (6, true)]);
    }

    #[tokio::test(start_paused = true)]
    async fn startup_gates_liveness_and_stops_once_started() {
        let (tx, rx) = watch::channel(false);
        let startup = script(
            Kind::Startup,
            params(0, 2, 1, 10),
            0,
            0,
            None,
            vec![fail(), fail(), Outcome::Success],
            100,
        );
        let liveness = async {
            let r = script(
                Kind::Liveness,
                params(1, 3, 1, 1),
                0,
                0,
                Some(rx),
                vec![],
                10,
            )
            .await;
            r.0
        };
        let ((s_calls, s_results), l_calls) = tokio::join!(
            async {
                let r = startup.await;
                tx.send_replace(true);
                r
            },
            liveness
        );
        assert_eq!(s_calls, [0, 2, 4]);
        assert_eq!(s_results, [(4, true)]);
        // Liveness waits for the startup probe, then runs every period.
        assert_eq!(l_calls, [4, 7]);
    }

    #[tokio::test(start_paused = true)]
    async fn jitter_delays_only_the_first_probe() {
        let (calls, _) = script(
            Kind::Readiness,
            params(0, 10, 1, 3),
            60,
            4,
            None,
            vec![],
            25,
        )
        .await;
        assert_eq!(calls, [4, 14, 24]);
        // The rest of the initial delay wins when it is longer.
        let (calls, _) = script(Kind::Readiness, params(5, 10, 1, 3), 0, 3, None, vec![], 16).await;
        assert_eq!(calls, [5, 15]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_hung_probe_costs_one_timeout() {
        let t0 = Instant::now();
        let mut results = Vec::new();
        let fut = run_loop(
            Kind::Liveness,
            params(0, 10, 1, 1),
            Duration::ZERO,
            Duration::ZERO,
            None,
            |_| std::future::pending::<Outcome>(),
            |r| results.push((t0.elapsed().as_secs(), r)),
        );
        fut.await;
        assert_eq!(results.len(), 2);
        assert_eq!(results[0].0, 2);
        assert_eq!(results[1], (2, Report::Result(false)));
    }
}
