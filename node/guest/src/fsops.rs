//! Filesystem operations of the files API, with errors mapped to the API's codes.

use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use warren_api::files::{format_mode, FileType, ListEntry, ListResponse, Stat, LIST_LIMIT};
use warren_api::time::rfc3339;
use warren_api::{ApiError, ErrorCode};

/// The guest's own directory inside the sandbox (socket, logs): not to be touched via the API.
pub const GUEST_DIR: &str = "/.warren";

/// Maps an IO error on `path` to the API's code.
pub fn io_error(path: &str, e: io::Error) -> ApiError {
    let code = match e.raw_os_error() {
        Some(libc::ENOENT) => ErrorCode::FileNotFound,
        Some(libc::ENOTDIR) => ErrorCode::NotADirectory,
        Some(libc::EISDIR) => ErrorCode::IsADirectory,
        Some(libc::EEXIST) => ErrorCode::AlreadyExists,
        Some(libc::EACCES) | Some(libc::EPERM) | Some(libc::EROFS) => ErrorCode::Forbidden,
        Some(libc::ENOSPC) | Some(libc::EDQUOT) | Some(libc::EFBIG) => ErrorCode::PayloadTooLarge,
        Some(libc::ENAMETOOLONG) | Some(libc::EINVAL) => ErrorCode::InvalidArgument,
        Some(libc::ENOTEMPTY) => ErrorCode::Conflict,
        _ => ErrorCode::Internal,
    };
    let what = match code {
        ErrorCode::FileNotFound => "no such file or directory".to_string(),
        ErrorCode::NotADirectory => "a path component is not a directory".to_string(),
        ErrorCode::IsADirectory => "is a directory".to_string(),
        ErrorCode::AlreadyExists => "already exists".to_string(),
        ErrorCode::PayloadTooLarge => "no space left in the sandbox".to_string(),
        ErrorCode::Conflict => "directory not empty".to_string(),
        _ => e.to_string(),
    };
    ApiError::new(code, format!("{path}: {what}"))
}

/// Checks an API path: absolute, and not the guest's own directory.
pub fn check_path(path: &str, writing: bool) -> Result<(), ApiError> {
    warren_api::files::validate_path(path)?;
    let normalized = normalize(path);
    if writing
        && (normalized == "/" || normalized == GUEST_DIR || normalized.starts_with("/.warren/"))
    {
        return Err(ApiError::new(
            ErrorCode::Forbidden,
            format!("{path}: reserved path"),
        ));
    }
    Ok(())
}

/// Lexically resolves `.` and `..` (no symlinks followed).
pub fn normalize(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for p in path.split('/') {
        match p {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    format!("/{}", parts.join("/"))
}

fn file_type(m: &std::fs::Metadata) -> FileType {
    let t = m.file_type();
    if t.is_symlink() {
        FileType::Symlink
    } else if t.is_dir() {
        FileType::Directory
    } else if t.is_file() {
        FileType::File
    } else {
        FileType::Other
    }
}

fn modified(m: &std::fs::Metadata) -> String {
    m.modified().map(rfc3339).unwrap_or_default()
}

pub async fn stat(path: &str) -> Result<Stat, ApiError> {
    check_path(path, false)?;
    let m = tokio::fs::symlink_metadata(path)
        .await
        .map_err(|e| io_error(path, e))?;
    Ok(Stat {
        path: path.to_string(),
        file_type: file_type(&m),
        size: m.len(),
        mode: format_mode(m.mode()),
        modified_at: modified(&m),
    })
}

pub async fn list(path: &str, recursive: bool, hidden: bool) -> Result<ListResponse, ApiError> {
    check_path(path, false)?;
    let m = tokio::fs::metadata(path)
        .await
        .map_err(|e| io_error(path, e))?;
    if !m.is_dir() {
        return Err(ApiError::new(
            ErrorCode::NotADirectory,
            format!("{path}: not a directory"),
        ));
    }
    let root = PathBuf::from(path);
    let result = tokio::task::spawn_blocking(move || walk(&root, recursive, hidden))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?;
    result.map_err(|e| io_error(path, e))
}

fn walk(root: &Path, recursive: bool, hidden: bool) -> io::Result<ListResponse> {
    let mut entries = Vec::new();
    let mut truncated = false;
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let rd = match std::fs::read_dir(&dir) {
            Ok(rd) => rd,
            Err(e) if dir == root => return Err(e),
            Err(_) => continue, // unreadable subdirectory: skip it
        };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !hidden && name.starts_with('.') {
                continue;
            }
            let Ok(m) = e.metadata() else { continue };
            let full = e.path();
            if recursive && m.is_dir() {
                stack.push(full.clone());
            }
            if entries.len() >= LIST_LIMIT {
                truncated = true;
                break;
            }
            let relative = full
                .strip_prefix(root)
                .unwrap_or(&full)
                .to_string_lossy()
                .into_owned();
            entries.push(ListEntry {
                name,
                path: full.to_string_lossy().into_owned(),
                relative_path: relative,
                file_type: file_type(&m),
                size: m.len(),
                mode: format_mode(m.mode()),
                modified_at: modified(&m),
            });
        }
        if truncated {
            break;
        }
    }
    entries.sort_by(|a, b| a.relative_path.cmp(&b.relative_path));
    Ok(ListResponse { entries, truncated })
}

/// Creates a directory; true when it was created (false: it existed and `recursive` was set).
pub async fn mkdir(path: &str, recursive: bool) -> Result<bool, ApiError> {
    check_path(path, true)?;
    match tokio::fs::metadata(path).await {
        Ok(m) if m.is_dir() && recursive => return Ok(false),
        Ok(_) => {
            return Err(ApiError::new(
                ErrorCode::AlreadyExists,
                format!("{path}: already exists"),
            ))
        }
        Err(_) => {}
    }
    let r = if recursive {
        tokio::fs::create_dir_all(path).await
    } else {
        tokio::fs::create_dir(path).await
    };
    r.map_err(|e| io_error(path, e))?;
    Ok(true)
}

pub async fn delete(path: &str, recursive: bool) -> Result<(), ApiError> {
    check_path(path, true)?;
    let m = tokio::fs::symlink_metadata(path)
        .await
        .map_err(|e| io_error(path, e))?;
    if m.is_dir() {
        if !recursive {
            return Err(ApiError::new(
                ErrorCode::IsADirectory,
                format!("{path}: is a directory (pass recursive=true to delete it)"),
            ));
        }
        tokio::fs::remove_dir_all(path).await
    } else {
        tokio::fs::remove_file(path).await
    }
    .map_err(|e| io_error(path, e))
}

pub async fn move_path(from: &str, to: &str, overwrite: bool) -> Result<(), ApiError> {
    check_path(from, true)?;
    check_path(to, true)?;
    let src = tokio::fs::symlink_metadata(from)
        .await
        .map_err(|e| io_error(from, e))?;
    if normalize(to).starts_with(&format!("{}/", normalize(from))) {
        return Err(ApiError::invalid(format!("cannot move {from} into itself")));
    }
    if let Ok(dst) = tokio::fs::symlink_metadata(to).await {
        if !overwrite {
            return Err(ApiError::new(
                ErrorCode::AlreadyExists,
                format!("{to}: already exists"),
            ));
        }
        if dst.is_dir() && !src.is_dir() {
            return Err(ApiError::new(
                ErrorCode::IsADirectory,
                format!("{to}: is a directory"),
            ));
        }
        if dst.is_dir() {
            tokio::fs::remove_dir_all(to)
                .await
                .map_err(|e| io_error(to, e))?;
        }
    }
    if let Some(parent) = Path::new(to).parent() {
        tokio::fs::create_dir_all(parent)
            .await
            .map_err(|e| io_error(to, e))?;
    }
    match tokio::fs::rename(from, to).await {
        Ok(()) => Ok(()),
        // Across filesystems, or a directory in a lower overlay layer: copy, then delete.
        Err(e) if e.raw_os_error() == Some(libc::EXDEV) => {
            let (f, t) = (PathBuf::from(from), PathBuf::from(to));
            tokio::task::spawn_blocking(move || copy_tree(&f, &t).and_then(|_| remove_any(&f)))
                .await
                .map_err(|e| ApiError::internal(e.to_string()))?
                .map_err(|e| io_error(from, e))
        }
        Err(e) => Err(io_error(from, e)),
    }
}

fn remove_any(p: &Path) -> io::Result<()> {
    if std::fs::symlink_metadata(p)?.is_dir() {
        std::fs::remove_dir_all(p)
    } else {
        std::fs::remove_file(p)
    }
}

/// Copies files, directories and symlinks, keeping permissions.
fn copy_tree(from: &Path, to: &Path) -> io::Result<()> {
    let m = std::fs::symlink_metadata(from)?;
    if m.file_type().is_symlink() {
        let target = std::fs::read_link(from)?;
        let _ = std::fs::remove_file(to);
        std::os::unix::fs::symlink(target, to)
    } else if m.is_dir() {
        std::fs::create_dir_all(to)?;
        std::fs::set_permissions(to, std::fs::Permissions::from_mode(m.mode() & 0o7777))?;
        for e in std::fs::read_dir(from)? {
            let e = e?;
            copy_tree(&e.path(), &to.join(e.file_name()))?;
        }
        Ok(())
    } else {
        std::fs::copy(from, to).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_resolves_dots() {
        assert_eq!(normalize("/a/./b/../c/"), "/a/c");
        assert_eq!(normalize("/.."), "/");
        assert_eq!(normalize("/.warren/../.warren/run"), "/.warren/run");
    }

    #[test]
    fn guest_dir_is_reserved_for_writes() {
        assert!(check_path("/.warren/run/guest.sock", true).is_err());
        assert!(check_path("/tmp/../.warren", true).is_err());
        assert!(check_path("/", true).is_err());
        assert!(check_path("/.warrenx", true).is_ok());
        assert!(check_path("/.warren/run", false).is_ok());
    }

    #[tokio::test]
    async fn list_hides_dotfiles_unless_asked() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("a.txt"), "a").unwrap();
        std::fs::write(d.path().join(".hidden"), "h").unwrap();
        std::fs::create_dir(d.path().join("sub")).unwrap();
        std::fs::write(d.path().join("sub/b.txt"), "b").unwrap();
        let p = d.path().to_str().unwrap();
        let names = |r: ListResponse| {
            r.entries
                .into_iter()
                .map(|e| e.relative_path)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            names(list(p, false, false).await.unwrap()),
            vec!["a.txt", "sub"]
        );
        assert_eq!(
            names(list(p, false, true).await.unwrap()),
            vec![".hidden", "a.txt", "sub"]
        );
        assert_eq!(
            names(list(p, true, false).await.unwrap()),
            vec!["a.txt", "sub", "sub/b.txt"]
        );
        let err = list(&format!("{p}/a.txt"), false, false).await.unwrap_err();
        assert_eq!(err.code, ErrorCode::NotADirectory);
        let err = list(&format!("{p}/missing"), false, false)
            .await
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::FileNotFound);
    }
}
