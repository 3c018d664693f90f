//! `picolet ctl logs [--tail N] [-f] ID`: the text of a container's CRI log
//! records, partial records joined; `-f` follows the file (as crictl does,
//! reading it directly) across rotation until the container has exited.

use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::time::Duration;

use anyhow::{Context, Result};
use cri_proto::log::Stream;
use cri_proto::v1::runtime_service_client::RuntimeServiceClient;
use cri_proto::v1::{ContainerState, ContainerStatus, ContainerStatusRequest};

/// How often a followed log is read again.
const FOLLOW_PERIOD: Duration = Duration::from_millis(200);

/// Lines made of records; a partial record waits for the rest of its line.
#[derive(Default)]
struct Joiner {
    open: [Option<String>; 2],
    /// Text after the last newline of what was read (a record being written).
    rest: String,
}

impl Joiner {
    fn push(&mut self, text: &str, lines: &mut Vec<(Stream, String)>) {
        self.rest.push_str(text);
        let Some(end) = self.rest.rfind('\n') else {
            return;
        };
        let whole: String = self.rest.drain(..=end).collect();
        for rec in whole.lines().filter_map(cri_proto::log::parse_record) {
            let slot = &mut self.open[rec.stream as usize];
            slot.get_or_insert_with(String::new).push_str(rec.text);
            if !rec.partial {
                lines.push((rec.stream, slot.take().unwrap_or_default()));
            }
        }
    }
}

fn print(lines: &[(Stream, String)]) -> Result<()> {
    let (mut out, mut err) = (std::io::stdout().lock(), std::io::stderr().lock());
    for (stream, line) in lines {
        match stream {
            Stream::Stdout => writeln!(out, "{line}").map_err(crate::ctl_out::stdout_error)?,
            Stream::Stderr => writeln!(err, "{line}")?,
        }
    }
    out.flush().map_err(crate::ctl_out::stdout_error)
}

async fn status(
    client: &mut RuntimeServiceClient<cri_proto::Channel>,
    id: &str,
) -> Result<ContainerStatus> {
    Ok(client
        .container_status(ContainerStatusRequest {
            container_id: id.to_string(),
            verbose: false,
        })
        .await?
        .into_inner()
        .status
        .unwrap_or_default())
}

pub async fn logs(
    client: &mut RuntimeServiceClient<cri_proto::Channel>,
    id: String,
    tail: Option<usize>,
    follow: bool,
) -> Result<()> {
    let st = status(client, &id).await?;
    if st.log_path.is_empty() {
        anyhow::bail!("container {id} has no log");
    }
    let path = st.log_path;
    let mut file = std::fs::File::open(&path).with_context(|| format!("read {path}"))?;
    let mut joiner = Joiner::default();
    let mut text = String::new();
    file.read_to_string(&mut text)
        .with_context(|| format!("read {path}"))?;
    let mut lines = Vec::new();
    joiner.push(&text, &mut lines);
    let skip = tail.map_or(0, |n| lines.len().saturating_sub(n));
    print(&lines[skip..])?;
    if !follow {
        return Ok(());
    }
    let mut inode = file.metadata().map(|m| m.ino()).unwrap_or(0);
    loop {
        let exited = status(client, &id).await?.state == ContainerState::ContainerExited as i32;
        // Whatever was written since, then a rotated file from its start.
        let mut lines = Vec::new();
        let mut buf = String::new();
        file.read_to_string(&mut buf)
            .with_context(|| format!("read {path}"))?;
        joiner.push(&buf, &mut lines);
        print(&lines)?;
        if let Ok(m) = std::fs::metadata(&path)
            && m.ino() != inode
        {
            file = std::fs::File::open(&path).with_context(|| format!("read {path}"))?;
            file.seek(SeekFrom::Start(0))?;
            inode = m.ino();
            continue;
        }
        if exited {
            return Ok(());
        }
        tokio::time::sleep(FOLLOW_PERIOD).await;
    }
}
