//! The `warren` binary; everything lives in the library.

fn main() {
    std::process::exit(warren_cli::run());
}
