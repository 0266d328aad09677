//! Terminals over WebSocket (api.md "Terminals"), and tickets.

use crate::{Client, Error, Result};
use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use reqwest::Method;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};
use warren_api::terminal::{ClientControl, ServerControl, TerminalQuery};
use warren_api::ticket::{Ticket, TicketRequest};
use warren_api::ApiError;

/// What a terminal socket delivers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TerminalEvent {
    Output(Bytes),
    Control(ServerControl),
}

/// One WebSocket attached to a terminal.
pub struct TerminalSocket {
    ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
}

impl std::fmt::Debug for TerminalSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TerminalSocket").finish_non_exhaustive()
    }
}

impl TerminalSocket {
    /// Sends keystrokes.
    pub async fn send(&mut self, input: impl Into<Bytes>) -> Result<()> {
        self.ws
            .send(Message::Binary(input.into()))
            .await
            .map_err(ws_error)
    }

    pub async fn resize(&mut self, cols: u16, rows: u16) -> Result<()> {
        let text = serde_json::to_string(&ClientControl::Resize { cols, rows })
            .expect("control serializes");
        self.ws
            .send(Message::Text(text.into()))
            .await
            .map_err(ws_error)
    }

    /// Sends a raw text frame (for tests of the server's checks).
    pub async fn send_text(&mut self, text: &str) -> Result<()> {
        self.ws
            .send(Message::Text(text.to_string().into()))
            .await
            .map_err(ws_error)
    }

    /// The next output chunk or control message; `None` once the socket closed.
    pub async fn next(&mut self) -> Option<Result<TerminalEvent>> {
        loop {
            let msg = match self.ws.next().await? {
                Ok(m) => m,
                Err(e) => return Some(Err(ws_error(e))),
            };
            return Some(Ok(match msg {
                Message::Binary(b) => TerminalEvent::Output(b),
                Message::Text(t) => match serde_json::from_str::<ServerControl>(&t) {
                    Ok(c) => TerminalEvent::Control(c),
                    Err(e) => return Some(Err(Error::Decode(format!("{e}: {t}")))),
                },
                Message::Close(_) => return None,
                _ => continue,
            }));
        }
    }

    pub async fn close(mut self) {
        let _ = self.ws.close(None).await;
    }
}

/// Opens the WebSocket; a refusal (the server answered HTTP) becomes the API's error.
async fn connect(req: impl IntoClientRequest + Unpin) -> Result<TerminalSocket> {
    match tokio_tungstenite::connect_async(req).await {
        Ok((ws, _)) => Ok(TerminalSocket { ws }),
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => {
            let status = resp.status().as_u16();
            let body = resp.body().clone().unwrap_or_default();
            Err(Error::Api {
                status,
                error: ApiError::from_response(status, &body),
            })
        }
        Err(e) => Err(ws_error(e)),
    }
}

fn ws_error(e: tokio_tungstenite::tungstenite::Error) -> Error {
    Error::Decode(format!("websocket: {e}"))
}

impl Client {
    /// The WebSocket URL of a terminal (http→ws), with its query percent-encoded.
    pub fn terminal_url(&self, id: &str, name: &str, q: &TerminalQuery) -> String {
        let base = self
            .base_url()
            .replacen("http://", "ws://", 1)
            .replacen("https://", "wss://", 1);
        let query = serde_urlencoded::to_string(q).expect("a terminal query encodes");
        format!("{base}/v1/sandboxes/{id}/terminals/{name}?{query}")
    }

    /// Attaches to terminal `name` of sandbox `id` (starting it when it does not run).
    pub async fn terminal(
        &self,
        id: &str,
        name: &str,
        q: &TerminalQuery,
    ) -> Result<TerminalSocket> {
        let mut req = self
            .terminal_url(id, name, q)
            .into_client_request()
            .map_err(ws_error)?;
        let auth = HeaderValue::from_str(&format!("Bearer {}", self.key))
            .map_err(|e| Error::Config(format!("API key is not a header value: {e}")))?;
        req.headers_mut().insert("authorization", auth);
        connect(req).await
    }

    /// Attaches with a ticket in the URL instead of the header (as a browser does).
    pub async fn terminal_with_ticket(
        &self,
        id: &str,
        name: &str,
        q: &TerminalQuery,
        ticket: &str,
    ) -> Result<TerminalSocket> {
        let url = format!("{}&ticket={ticket}", self.terminal_url(id, name, q));
        connect(url).await
    }

    /// `POST /v1/tickets`.
    pub async fn ticket(&self, req: &TicketRequest) -> Result<Ticket> {
        self.call(Method::POST, "/v1/tickets", req).await
    }

    /// `DELETE /v1/sandboxes/{id}/terminals/{name}`: ends its shell.
    pub async fn close_terminal(&self, id: &str, name: &str) -> Result<()> {
        let path = Self::sandbox_path(id, &format!("/terminals/{name}"));
        Self::check(self.request(Method::DELETE, &path).send().await?).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_terminal_url_encodes_its_query() {
        let c = Client::new("https://node.example:7443", "k").unwrap();
        let q = TerminalQuery {
            cols: Some(80),
            rows: None,
            shell: Some("rm -rf&x=1".into()),
            since: Some(5),
        };
        assert_eq!(
            c.terminal_url("s1", "main", &q),
            "wss://node.example:7443/v1/sandboxes/s1/terminals/main?cols=80&shell=rm+-rf%26x%3D1&since=5"
        );
    }
}
