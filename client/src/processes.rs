//! Background processes.

use crate::{Client, EventStream, Result};
use reqwest::Method;
use warren_api::process::{
    LogEvent, LogsResponse, Process, ProcessList, StartProcessRequest, WaitExitResponse,
    WaitLogRequest, WaitLogResponse, WaitPortRequest, WaitPortResponse,
};

impl Client {
    fn proc_path(id: &str, rest: &str) -> String {
        format!("/v1/sandboxes/{id}/processes{rest}")
    }

    pub async fn start_process(&self, id: &str, req: &StartProcessRequest) -> Result<Process> {
        self.call(Method::POST, &Self::proc_path(id, ""), req).await
    }

    pub async fn list_processes(&self, id: &str) -> Result<ProcessList> {
        self.json(self.request(Method::GET, &Self::proc_path(id, "")))
            .await
    }

    pub async fn get_process(&self, id: &str, process: &str) -> Result<Process> {
        self.json(self.request(Method::GET, &Self::proc_path(id, &format!("/{process}"))))
            .await
    }

    pub async fn kill_process(
        &self,
        id: &str,
        process: &str,
        signal: &str,
        grace_ms: u64,
    ) -> Result<Process> {
        let rb = self
            .request(Method::DELETE, &Self::proc_path(id, &format!("/{process}")))
            .query(&[
                ("signal", signal.to_string()),
                ("grace_ms", grace_ms.to_string()),
            ]);
        self.json(rb).await
    }

    pub async fn logs(&self, id: &str, process: &str, since: Option<u64>) -> Result<LogsResponse> {
        let mut rb = self.request(
            Method::GET,
            &Self::proc_path(id, &format!("/{process}/logs")),
        );
        if let Some(s) = since {
            rb = rb.query(&[("since", s)]);
        }
        self.json(rb).await
    }

    /// Replays from `since` (or the start), then follows until the process exits.
    pub async fn follow_logs(
        &self,
        id: &str,
        process: &str,
        since: Option<u64>,
    ) -> Result<EventStream<LogEvent>> {
        let mut rb = self
            .request(
                Method::GET,
                &Self::proc_path(id, &format!("/{process}/logs")),
            )
            .query(&[("follow", "true")]);
        if let Some(s) = since {
            rb = rb.query(&[("since", s)]);
        }
        EventStream::open(rb).await
    }

    pub async fn wait_log(
        &self,
        id: &str,
        process: &str,
        req: &WaitLogRequest,
    ) -> Result<WaitLogResponse> {
        self.call(
            Method::POST,
            &Self::proc_path(id, &format!("/{process}/wait/log")),
            req,
        )
        .await
    }

    pub async fn wait_port(
        &self,
        id: &str,
        process: &str,
        req: &WaitPortRequest,
    ) -> Result<WaitPortResponse> {
        self.call(
            Method::POST,
            &Self::proc_path(id, &format!("/{process}/wait/port")),
            req,
        )
        .await
    }

    pub async fn wait_exit(
        &self,
        id: &str,
        process: &str,
        timeout_ms: Option<u64>,
    ) -> Result<WaitExitResponse> {
        let body = serde_json::json!({ "timeout_ms": timeout_ms });
        self.call(
            Method::POST,
            &Self::proc_path(id, &format!("/{process}/wait/exit")),
            &body,
        )
        .await
    }
}
