//! The node's side of the guest agent: its binary and the client for its unix socket.

pub mod binary;
pub mod body;
pub mod client;
pub mod connect;
pub mod request;

pub use client::{GuestBody, GuestClient, GuestError};
