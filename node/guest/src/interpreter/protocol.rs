//! What the guest and a kernel say to each other: JSON lines, requests on the kernel's fd 3,
//! events on its fd 4. User code never holds these descriptors' numbers in mind, and
//! whatever it prints goes to fd 1/2 or to the stdout/stderr events, never into this channel.

use serde::{Deserialize, Serialize};
use warren_api::interpreter::{ExecutionError, ExecutionResult, Language};

/// The kernel scripts, embedded in the guest so that any image with the interpreter works.
pub const PYTHON_KERNEL: &str = include_str!("python_kernel.py");
pub const NODE_KERNEL: &str = include_str!("node_kernel.js");

/// One run: the code and the sequence number its `done` event must carry.
#[derive(Debug, Clone, Serialize)]
pub struct RunRequest<'a> {
    pub seq: u64,
    pub code: &'a str,
}

/// One line from a kernel.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum KernelEvent {
    /// Sent once, when the kernel is ready for runs.
    Ready {
        #[serde(default)]
        pid: Option<i32>,
    },
    /// The kernel cannot work in this image (e.g. TypeScript is missing); it exits next.
    Fatal {
        message: String,
    },
    Stdout {
        text: String,
    },
    Stderr {
        text: String,
    },
    Result(ExecutionResult),
    Error(ExecutionError),
    /// The run `seq` is over.
    Done {
        seq: u64,
    },
}

impl KernelEvent {
    pub fn parse(line: &[u8]) -> Option<KernelEvent> {
        serde_json::from_slice(line).ok()
    }
}

/// How to start a kernel for `language`: the interpreter, its script's file name and content,
/// and the arguments after the script.
pub struct KernelProgram {
    pub interpreter: &'static str,
    pub file_name: &'static str,
    pub script: &'static str,
    pub args: &'static [&'static str],
}

pub fn program(language: Language) -> KernelProgram {
    match language {
        Language::Python => KernelProgram {
            interpreter: "python3",
            file_name: "python_kernel.py",
            script: PYTHON_KERNEL,
            args: &[],
        },
        Language::Javascript => KernelProgram {
            interpreter: "node",
            file_name: "node_kernel.js",
            script: NODE_KERNEL,
            args: &["javascript"],
        },
        Language::Typescript => KernelProgram {
            interpreter: "node",
            file_name: "node_kernel.js",
            script: NODE_KERNEL,
            args: &["typescript"],
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_lines_parse() {
        assert_eq!(
            KernelEvent::parse(br#"{"type": "done", "seq": 4}"#),
            Some(KernelEvent::Done { seq: 4 })
        );
        let r = KernelEvent::parse(br#"{"type": "result", "text": "52", "json": 52}"#).unwrap();
        let KernelEvent::Result(r) = r else { panic!() };
        assert_eq!(r.text.as_deref(), Some("52"));
        assert_eq!(r.json, Some(serde_json::json!(52)));
        let e = KernelEvent::parse(
            br#"{"type":"error","name":"ZeroDivisionError","message":"division by zero","traceback":"tb"}"#,
        )
        .unwrap();
        assert!(
            matches!(e, KernelEvent::Error(ExecutionError { ref name, .. }) if name == "ZeroDivisionError")
        );
        assert_eq!(KernelEvent::parse(b"not json"), None);
    }

    #[test]
    fn requests_are_one_line() {
        let line = serde_json::to_string(&RunRequest {
            seq: 1,
            code: "print(1)\nprint(2)",
        })
        .unwrap();
        assert!(!line.contains('\n'));
    }
}
