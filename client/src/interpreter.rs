//! The code interpreter: contexts and runs.

use crate::{Client, EventStream, Result};
use reqwest::Method;
use warren_api::interpreter::{
    Context, ContextList, CreateContextRequest, RunCodeRequest, RunCodeResponse, RunEvent,
};

impl Client {
    fn context_path(id: &str, rest: &str) -> String {
        format!("/v1/sandboxes/{id}/contexts{rest}")
    }

    pub async fn create_context(&self, id: &str, req: &CreateContextRequest) -> Result<Context> {
        self.call(Method::POST, &Self::context_path(id, ""), req)
            .await
    }

    pub async fn list_contexts(&self, id: &str) -> Result<ContextList> {
        self.json(self.request(Method::GET, &Self::context_path(id, "")))
            .await
    }

    pub async fn delete_context(&self, id: &str, context: &str) -> Result<()> {
        let rb = self.request(
            Method::DELETE,
            &Self::context_path(id, &format!("/{context}")),
        );
        Self::check(rb.send().await?).await?;
        Ok(())
    }

    /// Runs code in a context and waits for the whole result.
    pub async fn run_code(
        &self,
        id: &str,
        context: &str,
        req: &RunCodeRequest,
    ) -> Result<RunCodeResponse> {
        self.call(
            Method::POST,
            &Self::context_path(id, &format!("/{context}/run")),
            req,
        )
        .await
    }

    /// Runs code in a context; its output, results and errors arrive as they happen, and
    /// the stream ends with `complete`.
    pub async fn run_code_stream(
        &self,
        id: &str,
        context: &str,
        req: &RunCodeRequest,
    ) -> Result<EventStream<RunEvent>> {
        let rb = self
            .request(
                Method::POST,
                &Self::context_path(id, &format!("/{context}/run")),
            )
            .json(req);
        EventStream::open(rb).await
    }
}
