//! `api-nodes HOST PORT TOKEN N`: N simulated nodes on one API server,
//! each as the agent talks to it: its own client (one HTTP/2 connection)
//! with the agent's reflectors on the pods bound to `sim-<i>` and on the
//! Node `sim-<i>`. Prints `ready` once every reflector has listed, and then
//! a line each time one lists again or fails to (`relist`, `failed`), with
//! the seconds since start, so a script can stop the API server and count
//! what the nodes do when it is back. Runs until killed.

use std::ops::ControlFlow;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use agent::kube::client::Client;
use agent::kube::config::KubeConfig;
use agent::kube::reflector::{self, Seen};
use agent::kube::watch::Query;
use anyhow::{Context, Result, bail};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [host, port, token, n] = args.as_slice() else {
        bail!("usage: api-nodes HOST PORT TOKEN N");
    };
    let n: usize = n.parse().context("N")?;
    let cfg = KubeConfig {
        host: host.clone(),
        port: port.parse().context("PORT")?,
        ca: None,
        client_cert: None,
        token: Some(token.clone()),
    };
    let listed = Arc::new(AtomicUsize::new(0));
    let start = tokio::time::Instant::now();
    for i in 0..n {
        let client = Arc::new(Client::new(&cfg, "api-nodes")?);
        let node = format!("sim-{i}");
        for query in [
            Query::pods_of(&node),
            Query::named("/api/v1/nodes".into(), &node),
        ] {
            let (client, listed) = (client.clone(), listed.clone());
            tokio::spawn(async move {
                let mut first = true;
                reflector::run(&client, &query, "simulated", |seen| {
                    let t = start.elapsed().as_secs_f64();
                    match seen {
                        Seen::Listed(_) if first => {
                            first = false;
                            if listed.fetch_add(1, Ordering::SeqCst) + 1 == 2 * n {
                                println!("ready");
                            }
                        }
                        Seen::Listed(_) => println!("relist {t:.3}"),
                        Seen::Changed(_) => {}
                        Seen::Failed(_) => println!("failed {t:.3}"),
                    }
                    ControlFlow::Continue(())
                })
                .await;
            });
        }
    }
    std::future::pending::<()>().await;
    Ok(())
}
