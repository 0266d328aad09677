//! Which paths a watch reports: `include` globs (any, when given) and `exclude` globs (none),
//! matched against the path relative to the watch's root and against its file name; an
//! excluded directory also hides everything below it and is not watched at all.

use globset::{Glob, GlobSet, GlobSetBuilder};
use std::path::{Path, PathBuf};
use warren_api::ApiError;

pub struct Filter {
    root: PathBuf,
    include: Option<GlobSet>,
    exclude: Option<GlobSet>,
}

fn build(patterns: &[String]) -> Result<Option<GlobSet>, ApiError> {
    if patterns.is_empty() {
        return Ok(None);
    }
    let mut b = GlobSetBuilder::new();
    for p in patterns {
        let g = Glob::new(p).map_err(|e| ApiError::invalid(format!("invalid glob {p:?}: {e}")))?;
        b.add(g);
    }
    b.build()
        .map(Some)
        .map_err(|e| ApiError::invalid(format!("invalid globs: {e}")))
}

impl Filter {
    pub fn new(root: &Path, include: &[String], exclude: &[String]) -> Result<Self, ApiError> {
        Ok(Filter {
            root: root.to_path_buf(),
            include: build(include)?,
            exclude: build(exclude)?,
        })
    }

    fn relative<'a>(&self, path: &'a Path) -> &'a Path {
        path.strip_prefix(&self.root).unwrap_or(path)
    }

    /// Whether `path` or a directory above it (below the root) is excluded.
    pub fn excluded(&self, path: &Path) -> bool {
        let Some(ex) = &self.exclude else {
            return false;
        };
        let rel = self.relative(path);
        let mut prefix = PathBuf::new();
        for part in rel.components() {
            prefix.push(part);
            if ex.is_match(&prefix) || ex.is_match(Path::new(part.as_os_str())) {
                return true;
            }
        }
        false
    }

    /// Whether an event on `path` is reported.
    pub fn reports(&self, path: &Path) -> bool {
        if self.excluded(path) {
            return false;
        }
        match &self.include {
            None => true,
            Some(inc) => {
                inc.is_match(self.relative(path))
                    || path.file_name().is_some_and(|n| inc.is_match(Path::new(n)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(include: &[&str], exclude: &[&str]) -> Filter {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        Filter::new(Path::new("/w"), &s(include), &s(exclude)).unwrap()
    }

    #[test]
    fn include_matches_names_and_relative_paths() {
        let only_ts = f(&["*.ts"], &[]);
        assert!(only_ts.reports(Path::new("/w/a.ts")));
        assert!(only_ts.reports(Path::new("/w/src/deep/b.ts")));
        assert!(!only_ts.reports(Path::new("/w/a.js")));
        let src = f(&["src/**"], &[]);
        assert!(src.reports(Path::new("/w/src/x/y.rs")));
        assert!(!src.reports(Path::new("/w/lib/y.rs")));
    }

    #[test]
    fn exclude_hides_a_directory_and_everything_below() {
        let no_git = f(&[], &[".git", "node_modules"]);
        assert!(no_git.excluded(Path::new("/w/.git")));
        assert!(!no_git.reports(Path::new("/w/.git/objects/ab/cd")));
        assert!(!no_git.reports(Path::new("/w/web/node_modules/x/index.js")));
        assert!(no_git.reports(Path::new("/w/src/main.rs")));
        assert!(Filter::new(Path::new("/w"), &["a[".into()], &[]).is_err());
    }
}
