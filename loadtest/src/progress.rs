//! Progress bars on stderr for the long scenarios (indicatif draws nothing when stderr is
//! not a terminal, so logs of CI runs stay clean).

use indicatif::{ProgressBar, ProgressStyle};

/// A bar of `len` steps named `what`, finished by its owner (`finish_and_clear`).
pub fn bar(len: usize, what: &str) -> ProgressBar {
    let pb = ProgressBar::new(len as u64);
    if let Ok(style) =
        ProgressStyle::with_template("{msg:>32} [{bar:32}] {pos}/{len} ({elapsed}, eta {eta})")
    {
        pb.set_style(style.progress_chars("=> "));
    }
    pb.set_message(what.to_string());
    pb
}
