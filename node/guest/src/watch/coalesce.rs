//! Coalescing a burst of events: repeated `modify` (or `attrib`) of one path with nothing else
//! happening to that path in between is reported once, at its last position, so the final
//! state is never lost and order between different kinds is kept.

use std::collections::HashMap;
use std::path::PathBuf;
use warren_api::watch::FsEventKind;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsEvent {
    pub kind: FsEventKind,
    pub path: PathBuf,
    pub is_dir: bool,
    pub timestamp: String,
}

pub fn coalesce(batch: Vec<FsEvent>) -> Vec<FsEvent> {
    let mut out: Vec<Option<FsEvent>> = Vec::with_capacity(batch.len());
    // Index in `out` of the last event kept for each path.
    let mut last: HashMap<PathBuf, usize> = HashMap::new();
    for e in batch {
        let repeat = matches!(e.kind, FsEventKind::Modify | FsEventKind::Attrib);
        if let Some(&i) = last.get(&e.path) {
            if repeat && out[i].as_ref().is_some_and(|prev| prev.kind == e.kind) {
                out[i] = None;
            }
        }
        last.insert(e.path.clone(), out.len());
        out.push(Some(e));
    }
    out.into_iter().flatten().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(kind: FsEventKind, path: &str) -> FsEvent {
        FsEvent {
            kind,
            path: path.into(),
            is_dir: false,
            timestamp: String::new(),
        }
    }

    #[test]
    fn repeated_modifies_collapse_but_order_and_final_state_stay() {
        use FsEventKind::*;
        let got = coalesce(vec![
            ev(Create, "/a"),
            ev(Modify, "/a"),
            ev(Modify, "/b"),
            ev(Modify, "/a"),
            ev(Modify, "/a"),
            ev(Delete, "/a"),
            ev(Create, "/a"),
            ev(Modify, "/a"),
        ]);
        let kinds: Vec<_> = got
            .iter()
            .map(|e| (e.kind, e.path.to_str().unwrap()))
            .collect();
        assert_eq!(
            kinds,
            vec![
                (Create, "/a"),
                (Modify, "/b"),
                (Modify, "/a"),
                (Delete, "/a"),
                (Create, "/a"),
                (Modify, "/a"),
            ]
        );
    }
}
