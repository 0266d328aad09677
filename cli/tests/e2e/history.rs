//! A checker for histories of appends, in the style of Jepsen's: clients append unique values
//! to one file per sandbox while faults happen, each append reporting the line it landed
//! on (under a lock inside the sandbox), and every request is recorded with when it was sent,
//! when it ended and how. Afterwards the settled files are read and the history is judged:
//!
//! * every acknowledged value is in its file, on the line it reported (unless the scenario
//!   allows losing it: an owner's death loses what came after its last checkpoint);
//! * no value is in a file twice (no request ran twice);
//! * no copy took an append after another copy had taken one it lacks (a fork: two live
//!   copies). An acknowledged append that is lost shows where its copy's history left the
//!   surviving one (the smallest such line); an append kept on that line or later was taken
//!   by the surviving copy, so a lost append sent after that one was acknowledged was taken
//!   by the other copy while both were live. A lost append acknowledged before the surviving
//!   copy took anything is a loss (an owner's death), judged as such;
//! * an append acknowledged before another was sent is on an earlier line;
//! * every request got an answer (a success or a retryable error), unless its entry node was
//!   stopped or killed while it was in flight.
//!
//! Pure logic: the scenarios that produce histories are in `histories.rs`.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

/// How one request ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The append ran: the node that ran it and the line the value landed on (1-based).
    Acked { node: String, line: usize },
    /// An error answer from the API.
    Refused {
        status: u16,
        code: String,
        retryable: bool,
    },
    /// The command ran but did not do what it says (non-zero exit, unreadable output).
    Failed(String),
    /// No answer: the client's timeout, or the connection broke.
    NoAnswer(String),
}

/// One request of the history.
#[derive(Debug, Clone, PartialEq)]
pub struct Op {
    pub sandbox: String,
    /// The appended value, unique in the history.
    pub value: String,
    /// The index of the node the request entered.
    pub entry: usize,
    /// When it was sent and when it ended, since the history began.
    pub sent: Duration,
    pub ended: Duration,
    pub outcome: Outcome,
}

impl Op {
    fn acked_line(&self) -> Option<usize> {
        match &self.outcome {
            Outcome::Acked { line, .. } => Some(*line),
            _ => None,
        }
    }
}

/// What the scenario forgives.
pub struct Allowances<'a> {
    /// Acknowledged appends it may lose (inside a documented loss window).
    pub may_lose: &'a dyn Fn(&Op) -> bool,
    /// Requests that may go unanswered (their entry node was stopped or killed meanwhile).
    pub may_go_unanswered: &'a dyn Fn(&Op) -> bool,
}

impl Allowances<'_> {
    /// Nothing forgiven.
    pub fn none() -> Allowances<'static> {
        Allowances {
            may_lose: &|_| false,
            may_go_unanswered: &|_| false,
        }
    }
}

#[derive(Debug, PartialEq)]
pub enum Violation {
    Lost(Op),
    Misplaced {
        op: Op,
        found_on: usize,
    },
    Repeated {
        sandbox: String,
        value: String,
    },
    /// The append the surviving copy took, then the one another copy took after it.
    Fork(Op, Op),
    Reordered {
        first: Op,
        second: Op,
    },
    Unanswered(Op),
    NotRetryable(Op),
    Failed(Op),
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::Lost(op) => write!(f, "acknowledged append lost: {op:?}"),
            Violation::Misplaced { op, found_on } => {
                write!(f, "acknowledged append found on line {found_on}: {op:?}")
            }
            Violation::Repeated { sandbox, value } => {
                write!(f, "{value} is in {sandbox}'s file more than once")
            }
            Violation::Fork(kept, lost) => write!(
                f,
                "two live copies: one acknowledged {kept:?}, then the other took {lost:?} (lost)"
            ),
            Violation::Reordered { first, second } => write!(
                f,
                "an append acknowledged before another was sent landed after it: {first:?} then {second:?}"
            ),
            Violation::Unanswered(op) => write!(f, "no answer: {op:?}"),
            Violation::NotRetryable(op) => write!(f, "a non-retryable error: {op:?}"),
            Violation::Failed(op) => write!(f, "the append did not run as asked: {op:?}"),
        }
    }
}

/// Judges `ops` against the settled files (`files`: sandbox → its lines).
pub fn check(
    ops: &[Op],
    files: &BTreeMap<String, Vec<String>>,
    allow: &Allowances,
) -> Vec<Violation> {
    let mut found = Vec::new();
    // Where each value is, per sandbox (1-based lines), and values seen twice.
    let mut lines_of: BTreeMap<(&str, &str), Vec<usize>> = BTreeMap::new();
    for (sandbox, lines) in files {
        for (i, value) in lines.iter().enumerate() {
            lines_of
                .entry((sandbox.as_str(), value.as_str()))
                .or_default()
                .push(i + 1);
        }
    }
    for ((sandbox, value), at) in &lines_of {
        if at.len() > 1 {
            found.push(Violation::Repeated {
                sandbox: sandbox.to_string(),
                value: value.to_string(),
            });
        }
    }
    // Acknowledged appends that are where they said they landed.
    let mut kept: Vec<&Op> = Vec::new();
    for op in ops {
        match &op.outcome {
            Outcome::Acked { line, .. } => {
                match lines_of.get(&(op.sandbox.as_str(), op.value.as_str())) {
                    None if (allow.may_lose)(op) => {}
                    None => found.push(Violation::Lost(op.clone())),
                    Some(at) if !at.contains(line) => found.push(Violation::Misplaced {
                        op: op.clone(),
                        found_on: at[0],
                    }),
                    Some(_) => kept.push(op),
                }
            }
            Outcome::Refused { retryable, .. } if !retryable => {
                found.push(Violation::NotRetryable(op.clone()))
            }
            Outcome::Refused { .. } => {}
            Outcome::Failed(_) => found.push(Violation::Failed(op.clone())),
            Outcome::NoAnswer(_) if (allow.may_go_unanswered)(op) => {}
            Outcome::NoAnswer(_) => found.push(Violation::Unanswered(op.clone())),
        }
    }
    let lost: Vec<&Op> = ops
        .iter()
        .filter(|o| {
            o.acked_line().is_some()
                && !lines_of.contains_key(&(o.sandbox.as_str(), o.value.as_str()))
        })
        .collect();
    for l in &lost {
        let diverged = lost
            .iter()
            .filter(|o| o.sandbox == l.sandbox)
            .filter_map(|o| o.acked_line())
            .min();
        let taken_by_other = kept
            .iter()
            .find(|k| k.sandbox == l.sandbox && k.acked_line() >= diverged && k.ended < l.sent);
        if let Some(k) = taken_by_other {
            found.push(Violation::Fork((*k).clone(), (*l).clone()));
        }
    }
    for a in &kept {
        for b in &kept {
            if a.sandbox == b.sandbox && a.ended < b.sent && a.acked_line() > b.acked_line() {
                found.push(Violation::Reordered {
                    first: (*a).clone(),
                    second: (*b).clone(),
                });
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(value: &str, sent_ms: u64, ended_ms: u64, outcome: Outcome) -> Op {
        Op {
            sandbox: "s".into(),
            value: value.into(),
            entry: 0,
            sent: Duration::from_millis(sent_ms),
            ended: Duration::from_millis(ended_ms),
            outcome,
        }
    }

    fn acked(value: &str, sent_ms: u64, ended_ms: u64, line: usize) -> Op {
        op(
            value,
            sent_ms,
            ended_ms,
            Outcome::Acked {
                node: "n1".into(),
                line,
            },
        )
    }

    fn file(lines: &[&str]) -> BTreeMap<String, Vec<String>> {
        BTreeMap::from([(
            "s".to_string(),
            lines.iter().map(|l| l.to_string()).collect(),
        )])
    }

    #[test]
    fn a_history_whose_acknowledged_appends_are_all_in_place_passes() {
        let ops = [
            acked("a", 0, 10, 1),
            acked("b", 20, 30, 2),
            // Refused but retryable, and unacknowledged values that did land: both fine.
            op(
                "c",
                40,
                50,
                Outcome::Refused {
                    status: 503,
                    code: "UNAVAILABLE".into(),
                    retryable: true,
                },
            ),
            acked("d", 60, 70, 4),
        ];
        assert_eq!(
            check(&ops, &file(&["a", "b", "c", "d"]), &Allowances::none()),
            vec![]
        );
    }

    #[test]
    fn a_missing_acknowledged_append_is_lost_unless_the_scenario_allows_it() {
        let ops = [acked("a", 0, 10, 1), acked("b", 20, 30, 2)];
        let found = check(&ops, &file(&["a"]), &Allowances::none());
        assert_eq!(found, vec![Violation::Lost(ops[1].clone())]);
        let allow = Allowances {
            may_lose: &|o: &Op| o.value == "b",
            may_go_unanswered: &|_| false,
        };
        assert_eq!(check(&ops, &file(&["a"]), &allow), vec![]);
    }

    #[test]
    fn a_copy_that_takes_appends_after_its_replacement_did_is_a_fork() {
        // Both copies had line 1. The new one took "c" on line 2; later the old one took "d"
        // (on its line 2 or 3): both lost, and "d" was sent after "c" was acknowledged.
        let ops = [
            acked("a", 0, 10, 1),
            acked("b", 100, 200, 2),
            acked("c", 300, 400, 2),
            acked("d", 500, 600, 3),
            acked("e", 700, 800, 3),
        ];
        let allow = Allowances {
            may_lose: &|_| true,
            may_go_unanswered: &|_| false,
        };
        let found = check(&ops, &file(&["a", "c", "e"]), &allow);
        assert_eq!(found, vec![Violation::Fork(ops[2].clone(), ops[3].clone())]);
    }

    #[test]
    fn a_lost_append_replaced_later_is_a_loss_not_a_fork() {
        // The old copy acknowledged line 2, died, and the new copy (from a checkpoint with
        // one line) later took line 2 again: not two live copies at once.
        let ops = [
            acked("a", 0, 10, 1),
            acked("b", 20, 30, 2),
            acked("c", 5000, 5100, 2),
        ];
        let found = check(&ops, &file(&["a", "c"]), &Allowances::none());
        assert_eq!(found, vec![Violation::Lost(ops[1].clone())]);
    }

    #[test]
    fn a_value_twice_or_on_another_line_than_acknowledged_is_caught() {
        let ops = [acked("a", 0, 10, 1), acked("b", 20, 30, 2)];
        let found = check(&ops, &file(&["a", "x", "b", "a"]), &Allowances::none());
        assert!(found.contains(&Violation::Repeated {
            sandbox: "s".into(),
            value: "a".into()
        }));
        assert!(found.contains(&Violation::Misplaced {
            op: ops[1].clone(),
            found_on: 3
        }));
    }

    #[test]
    fn an_append_sent_after_another_was_acknowledged_must_land_after_it() {
        // Both are where they say, but the later one says an earlier line.
        let ops = [acked("a", 0, 10, 2), acked("b", 20, 30, 1)];
        let found = check(&ops, &file(&["b", "a"]), &Allowances::none());
        assert_eq!(
            found,
            vec![Violation::Reordered {
                first: ops[0].clone(),
                second: ops[1].clone()
            }]
        );
    }

    #[test]
    fn silence_and_final_errors_count_unless_the_entry_node_was_down() {
        let ops = [
            op("a", 0, 10, Outcome::NoAnswer("timed out".into())),
            op(
                "b",
                20,
                30,
                Outcome::Refused {
                    status: 404,
                    code: "SANDBOX_NOT_FOUND".into(),
                    retryable: false,
                },
            ),
            op("c", 40, 50, Outcome::Failed("exit 1".into())),
        ];
        let found = check(&ops, &file(&[]), &Allowances::none());
        assert_eq!(
            found,
            vec![
                Violation::Unanswered(ops[0].clone()),
                Violation::NotRetryable(ops[1].clone()),
                Violation::Failed(ops[2].clone()),
            ]
        );
        let allow = Allowances {
            may_lose: &|_| false,
            may_go_unanswered: &|o: &Op| o.value == "a",
        };
        assert_eq!(check(&ops, &file(&[]), &allow).len(), 2);
    }
}
