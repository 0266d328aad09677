//! Archives for snapshots: `POST /archive/pack` streams a tar of the paths the node names
//! (`warren-guest pack` does the same on stdin/stdout, run by the node in the sandbox's mount
//! namespace), `POST /archive/quiesce` stops the sandbox's processes before a sleep,
//! `POST /archive/remove` deletes paths, `POST /archive/unpack` extracts a tar stream over
//! the root filesystem. The node decides what changed (from the container engine); the
//! guest only reads and writes files, so that any image works.
//!
//! What a snapshot keeps of each path: regular files, directories and symbolic links with
//! their modes, owners and times; hard links between saved files (as links, not copies);
//! FIFOs and device nodes; the extended attributes a sandbox can set back (`user.*`, and
//! `security.capability` for file capabilities), as PAX records. Sockets are not kept: they
//! belong to a process, which does not survive a snapshot.

use crate::http::{self, Body, Request, Response};
use bytes::Bytes;
use futures_util::TryStreamExt;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use tokio::sync::mpsc;
use warren_api::snapshot::{
    HoldRequest, HoldResponse, IdShift, PackRequest, ReleaseRequest, RemovePathsRequest,
};
use warren_api::{ApiError, ErrorCode};

/// Bytes gathered before a piece of the archive goes out.
const PIECE: usize = 256 * 1024;

/// A `Write` that hands the archive to the response body in pieces.
pub(crate) struct ChannelWriter {
    tx: mpsc::Sender<std::io::Result<Bytes>>,
    buf: Vec<u8>,
}

impl ChannelWriter {
    pub(crate) fn new(tx: mpsc::Sender<std::io::Result<Bytes>>) -> ChannelWriter {
        ChannelWriter {
            tx,
            buf: Vec::with_capacity(PIECE),
        }
    }
}

impl ChannelWriter {
    fn send(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let piece = Bytes::from(std::mem::replace(&mut self.buf, Vec::with_capacity(PIECE)));
        self.tx
            .blocking_send(Ok(piece))
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::BrokenPipe, "reader went away"))
    }
}

impl Write for ChannelWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(data);
        if self.buf.len() >= PIECE {
            self.send()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.send()
    }
}

/// Every path of a pack request is one the guest may read.
fn validate_paths(req: &PackRequest) -> Result<(), ApiError> {
    req.paths
        .iter()
        .try_for_each(|p| warren_api::files::validate_path(p))
}

pub async fn pack(req: Request) -> Result<Response, ApiError> {
    let body: PackRequest = http::read_json(req).await?;
    if let Err(e) = validate_paths(&body) {
        if let Some(h) = body.hold {
            crate::pack_hold::end(h);
        }
        return Err(e);
    }
    if let Some(h) = body.hold {
        if !crate::pack_hold::claim(h) {
            return Err(ApiError::new(
                ErrorCode::Conflict,
                format!("hold {h} is not open (it ended unclaimed): the archive would not be one instant"),
            ));
        }
    }
    if body.quiesce {
        quiesce().await;
    }
    let (tx, rx) = mpsc::channel::<std::io::Result<Bytes>>(8);
    tokio::task::spawn_blocking(move || {
        let errors = tx.clone();
        let out = ChannelWriter::new(tx);
        let written = write_archive(&body.paths, out, None);
        // Read whole (or failed, or the node went away): the sandbox goes on.
        if let Some(h) = body.hold {
            crate::pack_hold::end(h);
        }
        if let Err(e) = written {
            let _ = errors.blocking_send(Err(e));
        }
    });
    let stream = tokio_stream_from(rx).map_ok(Frame::data);
    let out: Body = BodyExt::boxed(StreamBody::new(stream));
    Ok(hyper::Response::builder()
        .status(200)
        .header("content-type", "application/x-tar")
        .body(out)
        .expect("valid response"))
}

pub(crate) fn tokio_stream_from(
    mut rx: mpsc::Receiver<std::io::Result<Bytes>>,
) -> impl futures_util::Stream<Item = std::io::Result<Bytes>> {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

/// Writes a tar of `paths` (absolute, as seen from this process's root) to `out`, with
/// owners as the sandbox sees them: on the host (`shift`), a sandbox in a user namespace
/// has its files owned by shifted ids.
pub fn write_archive<W: Write>(
    paths: &[String],
    out: W,
    shift: Option<IdShift>,
) -> std::io::Result<()> {
    let mut b = tar::Builder::new(out);
    b.follow_symlinks(false);
    b.mode(tar::HeaderMode::Complete);
    // (device, inode) of files with several links -> the name they were first saved under.
    let mut linked: HashMap<(u64, u64), String> = HashMap::new();
    for p in paths {
        let name = p.trim_start_matches('/');
        if name.is_empty() {
            continue;
        }
        match append_entry(&mut b, p, name, &mut linked, shift) {
            Ok(()) => {}
            // Gone since the node listed it (a temporary file): nothing to save.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(std::io::Error::new(e.kind(), format!("{p}: {e}"))),
        }
    }
    b.into_inner()?.flush()
}

/// `warren-guest pack`: a [`PackRequest`] on stdin, its archive on stdout. The node runs it
/// in the sandbox's mount namespace but its own cgroup, so that saving a snapshot neither
/// waits for the sandbox's CPU quota nor counts as the sandbox's CPU use. Exit code 0 only
/// when the whole archive was written.
pub fn pack_stdio(shift: Option<IdShift>) -> i32 {
    let run = || -> std::io::Result<()> {
        let mut input = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut input)?;
        let req: PackRequest = serde_json::from_slice(&input)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
        validate_paths(&req)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e.message))?;
        let out = std::io::BufWriter::with_capacity(PIECE, std::io::stdout().lock());
        write_archive(&req.paths, out, shift)
    };
    match run() {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("warren-guest pack: {e}");
            1
        }
    }
}

/// Appends one path. Everything that can fail because the path vanished is read before the
/// first byte of its entry is written, so a vanished path leaves no partial entry behind.
pub(crate) fn append_entry<W: Write>(
    b: &mut tar::Builder<W>,
    path: &str,
    name: &str,
    linked: &mut HashMap<(u64, u64), String>,
    shift: Option<IdShift>,
) -> std::io::Result<()> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let meta = std::fs::symlink_metadata(path)?;
    let t = meta.file_type();
    if t.is_socket() {
        return Ok(());
    }
    let mut header = tar::Header::new_gnu();
    header.set_metadata_in_mode(&meta, tar::HeaderMode::Complete);
    if let Some(s) = shift {
        header.set_uid(s.uid_in_sandbox(meta.uid() as u64));
        header.set_gid(s.gid_in_sandbox(meta.gid() as u64));
    }
    if t.is_file() && meta.nlink() > 1 {
        let key = (meta.dev(), meta.ino());
        if let Some(first) = linked.get(&key) {
            header.set_entry_type(tar::EntryType::Link);
            header.set_size(0);
            return b.append_link(&mut header, name, first);
        }
        linked.insert(key, name.to_string());
    }
    // Only files and directories carry xattrs here (Linux refuses user.* on the rest).
    let attrs = if t.is_file() || t.is_dir() {
        kept_xattrs(path)
    } else {
        Vec::new()
    };
    if t.is_file() {
        use std::os::unix::fs::OpenOptionsExt;
        // Neither a symlink nor a FIFO swapped in since the lstat above is followed or
        // blocked on: opened without following, without waiting, then checked.
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(path)?;
        let now = file.metadata()?;
        if !now.is_file() {
            return Err(std::io::ErrorKind::NotFound.into());
        }
        // The size as of now (the file may have changed since it was listed).
        header.set_size(now.len());
        append_pax(b, &attrs)?;
        return b.append_data(&mut header, name, &mut file);
    }
    if t.is_symlink() {
        let target = std::fs::read_link(path)?;
        let raw = target.as_os_str().as_bytes();
        let field = &mut header.as_old_mut().linkname;
        if raw.len() < field.len() {
            // The target byte for byte (the tar crate's own setter turns `/` into `//` and
            // normalizes `./` and trailing slashes away).
            field.fill(0);
            field[..raw.len()].copy_from_slice(raw);
            return b.append_data(&mut header, name, std::io::empty());
        }
        return b.append_link(&mut header, name, target);
    }
    if t.is_fifo() || t.is_char_device() || t.is_block_device() {
        header.set_entry_type(if t.is_fifo() {
            tar::EntryType::Fifo
        } else if t.is_char_device() {
            tar::EntryType::Char
        } else {
            tar::EntryType::Block
        });
        let dev = meta.rdev();
        header.set_size(0);
        header.set_device_major(libc::major(dev))?;
        header.set_device_minor(libc::minor(dev))?;
    }
    append_pax(b, &attrs)?;
    b.append_data(&mut header, name, std::io::empty())
}

/// Whether an extended attribute is saved: those a sandbox's root can set back.
fn kept_xattr(name: &OsStr) -> bool {
    let n = name.as_bytes();
    n.starts_with(b"user.") || n == b"security.capability"
}

/// The path's kept extended attributes (none where the filesystem has no xattrs).
fn kept_xattrs(path: &str) -> Vec<(OsString, Vec<u8>)> {
    let Ok(names) = xattr::list(path) else {
        return Vec::new();
    };
    names
        .filter(|n| kept_xattr(n))
        .filter_map(|n| {
            let v = xattr::get(path, &n).ok()??;
            Some((n, v))
        })
        .collect()
}

/// A PAX extended header carrying `attrs` for the entry that follows it.
fn append_pax<W: Write>(
    b: &mut tar::Builder<W>,
    attrs: &[(OsString, Vec<u8>)],
) -> std::io::Result<()> {
    if attrs.is_empty() {
        return Ok(());
    }
    let mut data = Vec::new();
    for (k, v) in attrs {
        let mut kv = b"SCHILY.xattr.".to_vec();
        kv.extend_from_slice(k.as_bytes());
        kv.push(b'=');
        kv.extend_from_slice(v);
        kv.push(b'\n');
        data.extend_from_slice(&pax_record(&kv));
    }
    let mut header = tar::Header::new_ustar();
    header.set_entry_type(tar::EntryType::XHeader);
    header.set_size(data.len() as u64);
    header.set_mode(0o644);
    header.set_path("PaxHeader")?;
    header.set_cksum();
    b.append(&header, &data[..])
}

/// One PAX record, `"<length> <key>=<value>\n"`, whose length counts its own digits.
fn pax_record(kv: &[u8]) -> Vec<u8> {
    let mut len = kv.len() + 2;
    while len != kv.len() + 1 + len.to_string().len() {
        len = kv.len() + 1 + len.to_string().len();
    }
    let mut out = format!("{len} ").into_bytes();
    out.extend_from_slice(kv);
    out
}

/// `warren-guest unpack`: a tar on stdin extracted over `/`; errors on stderr.
/// Run by the node in the sandbox's mount namespace (see [`pack_stdio`]), with the owners
/// shifted to the host's ids of a sandbox in a user namespace (`shift`). Exit code 0 only
/// when the whole archive was written.
pub fn unpack_stdio(shift: Option<IdShift>) -> i32 {
    let input = std::io::BufReader::with_capacity(1 << 20, std::io::stdin().lock());
    match extract(input, Path::new("/"), shift) {
        Ok(_) => 0,
        Err(e) => {
            eprintln!("warren-guest unpack: cannot unpack the snapshot: {e}");
            1
        }
    }
}

/// Stops every process of the sandbox but this one (PID 1 of its namespace), so that the
/// files are still while they are saved. Used only right before the sandbox sleeps.
async fn quiesce() {
    // SAFETY: kill(2) with pid -1 from PID 1 signals every other process in the namespace.
    unsafe {
        libc::kill(-1, libc::SIGKILL);
    }
    // Let the kernel finish tearing them down (their open files close with them).
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
}

/// `POST /archive/hold`: stops every other process until the pack that claims the hold ends
/// (`pack_hold`).
pub async fn hold(req: Request) -> Result<Response, ApiError> {
    let body: HoldRequest = http::read_json(req).await?;
    let max = std::time::Duration::from_millis(body.max_ms);
    let (hold, stopped) = tokio::task::spawn_blocking(move || crate::pack_hold::begin(max))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
        .map_err(|e| ApiError::new(ErrorCode::Conflict, e))?;
    Ok(http::json(200, &HoldResponse { hold, stopped }))
}

/// `POST /archive/release`: ends a hold no pack claimed (the node gave up on it).
pub async fn release(req: Request) -> Result<Response, ApiError> {
    let body: ReleaseRequest = http::read_json(req).await?;
    let resumed = crate::pack_hold::end(body.hold);
    Ok(http::json(200, &serde_json::json!({ "resumed": resumed })))
}

/// `POST /archive/quiesce`: stops every other process before the node saves the files.
pub async fn quiesce_all(_req: Request) -> Result<Response, ApiError> {
    quiesce().await;
    Ok(http::json(200, &serde_json::json!({ "quiesced": true })))
}

/// `POST /archive/remove`: the paths a snapshot deleted, removed before it is unpacked.
pub async fn remove(req: Request) -> Result<Response, ApiError> {
    let body: RemovePathsRequest = http::read_json(req).await?;
    let removed = tokio::task::spawn_blocking(move || remove_paths(&body.paths))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))??;
    Ok(http::json(200, &serde_json::json!({ "removed": removed })))
}

/// `warren-guest remove`: a [`RemovePathsRequest`] on stdin, its paths removed. Run by the
/// node in the sandbox's filesystem (see [`pack_stdio`]) before it unpacks a snapshot there.
pub fn remove_stdio() -> i32 {
    let run = || -> Result<u64, ApiError> {
        let mut input = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut input)
            .map_err(|e| ApiError::internal(e.to_string()))?;
        let req: RemovePathsRequest = serde_json::from_slice(&input)
            .map_err(|e| ApiError::invalid(format!("bad remove request: {e}")))?;
        remove_paths(&req.paths)
    };
    match run() {
        Ok(_) => 0,
        Err(e) => {
            eprintln!("warren-guest remove: {}", e.message);
            1
        }
    }
}

/// Removes each path (a directory with everything in it); one that is not there is fine.
/// Returns how many were removed.
fn remove_paths(paths: &[String]) -> Result<u64, ApiError> {
    for p in paths {
        warren_api::files::validate_path(p)?;
        if p == "/" {
            return Err(ApiError::invalid("refusing to remove /"));
        }
    }
    let mut removed = 0u64;
    for p in paths {
        let r = match std::fs::symlink_metadata(p) {
            Ok(m) if m.is_dir() => std::fs::remove_dir_all(p),
            Ok(_) => std::fs::remove_file(p),
            Err(e) => Err(e),
        };
        match r {
            Ok(()) => removed += 1,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(ApiError::internal(format!("cannot remove {p}: {e}"))),
        }
    }
    Ok(removed)
}

pub async fn unpack(req: Request) -> Result<Response, ApiError> {
    let stream = req
        .into_body()
        .into_data_stream()
        .map_err(std::io::Error::other);
    // Large reads: every read through the bridge is a trip into the async runtime.
    let mut reader = std::io::BufReader::with_capacity(
        1 << 20,
        tokio_util::io::SyncIoBridge::new(tokio_util::io::StreamReader::new(stream)),
    );
    let (entries, bytes) = tokio::task::spawn_blocking(move || {
        let r = extract(&mut reader, Path::new("/"), None);
        // Read the rest (after a failure, and after the archive's end, which the tar reader
        // meets before the end of the body), so the node gets this answer instead of a
        // broken connection.
        let _ = std::io::copy(&mut reader, &mut std::io::sink());
        r
    })
    .await
    .map_err(|e| ApiError::internal(e.to_string()))?
    .map_err(|e| ApiError::internal(format!("cannot unpack the snapshot: {e}")))?;
    Ok(http::json(
        200,
        &serde_json::json!({ "entries": entries, "bytes": bytes }),
    ))
}

/// Extracts a tar over `root`, keeping modes, owners (shifted by `shift` to the host's ids
/// of a sandbox in a user namespace), times and kept xattrs: (entries, bytes).
fn extract(
    reader: impl std::io::Read,
    root: &Path,
    shift: Option<IdShift>,
) -> std::io::Result<(u64, u64)> {
    use tar::EntryType;
    let mut a = tar::Archive::new(reader);
    a.set_overwrite(true);
    a.set_preserve_permissions(true);
    // Shifted owners are set here, after each entry (the tar crate has no shift).
    a.set_preserve_ownerships(shift.is_none());
    a.set_preserve_mtime(true);
    a.set_unpack_xattrs(true);
    let (mut entries, mut bytes) = (0u64, 0u64);
    for entry in a.entries()? {
        let mut e = entry?;
        bytes += e.size();
        let kind = e.header().entry_type();
        let special = matches!(kind, EntryType::Fifo | EntryType::Char | EntryType::Block);
        if special || kind == EntryType::Link {
            // These replace what is there (the tar crate would refuse a hard link over an
            // existing file, and writes FIFOs and devices as regular files).
            let dst = inside(root, &e.path()?)?;
            match std::fs::symlink_metadata(&dst) {
                Ok(m) if !m.is_dir() => std::fs::remove_file(&dst)?,
                _ => {}
            }
            if special {
                make_special(e.header(), &dst, shift)?;
                entries += 1;
                continue;
            }
        }
        let dst = match shift {
            Some(_) => Some(inside(root, &e.path()?)?),
            None => None,
        };
        e.unpack_in(root)?;
        if let (Some(s), Some(dst)) = (shift, dst) {
            set_shifted_owner(e.header(), &dst, s)?;
        }
        entries += 1;
    }
    Ok((entries, bytes))
}

/// Gives an unpacked entry its owner from the archive on the host's side of the sandbox's
/// user namespace, then its mode again (a change of owner clears set-id bits).
fn set_shifted_owner(h: &tar::Header, dst: &Path, s: IdShift) -> std::io::Result<()> {
    use std::ffi::CString;
    let c = CString::new(dst.as_os_str().as_bytes())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
    let (uid, gid) = (s.uid_on_host(h.uid()?), s.gid_on_host(h.gid()?));
    // SAFETY: `c` is a valid NUL-terminated path for both calls.
    unsafe {
        if libc::lchown(c.as_ptr(), uid as u32, gid as u32) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if h.entry_type() != tar::EntryType::Symlink
            && libc::chmod(c.as_ptr(), h.mode()? & 0o7777) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// `root` joined with an archive path that stays inside it.
pub(crate) fn inside(root: &Path, path: &Path) -> std::io::Result<std::path::PathBuf> {
    use std::path::Component;
    if path.components().all(|c| matches!(c, Component::Normal(_))) {
        return Ok(root.join(path));
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!("{} leaves the archive's root", path.display()),
    ))
}

/// Creates a FIFO or device node as the header describes, with its owner, mode and time.
fn make_special(h: &tar::Header, dst: &Path, shift: Option<IdShift>) -> std::io::Result<()> {
    use std::ffi::CString;
    let kind = match h.entry_type() {
        tar::EntryType::Fifo => libc::S_IFIFO,
        tar::EntryType::Char => libc::S_IFCHR,
        _ => libc::S_IFBLK,
    };
    let mode = h.mode()? & 0o7777;
    let dev = libc::makedev(
        h.device_major()?.unwrap_or(0),
        h.device_minor()?.unwrap_or(0),
    );
    let c = CString::new(dst.as_os_str().as_bytes())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
    let check = |r: libc::c_int| {
        if r == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    };
    // SAFETY: `c` is a valid NUL-terminated path for each call below.
    unsafe {
        check(libc::mknod(c.as_ptr(), kind | mode, dev))?;
        let (uid, gid) = match shift {
            Some(s) => (s.uid_on_host(h.uid()?), s.gid_on_host(h.gid()?)),
            None => (h.uid()?, h.gid()?),
        };
        check(libc::lchown(c.as_ptr(), uid as u32, gid as u32))?;
        // mknod applied the umask, and chown may have cleared set-id bits.
        check(libc::chmod(c.as_ptr(), mode))?;
        let t = libc::timespec {
            tv_sec: h.mtime()? as _,
            tv_nsec: 0,
        };
        let times = [t, t];
        check(libc::utimensat(
            libc::AT_FDCWD,
            c.as_ptr(),
            times.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        ))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(paths: Vec<String>) -> (tempfile::TempDir, (u64, u64)) {
        let mut tar_bytes = Vec::new();
        write_archive(&paths, &mut tar_bytes, None).unwrap();
        let dst = tempfile::tempdir().unwrap();
        let counts = extract(&tar_bytes[..], dst.path(), None).unwrap();
        (dst, counts)
    }

    #[test]
    fn owners_are_shifted_out_of_and_into_a_user_namespace() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: needs root (chown)");
            return;
        }
        let shift = IdShift {
            uid: 100000,
            gid: 200000,
            len: 65536,
        };
        let src = tempfile::tempdir().unwrap();
        let f = src.path().join("f");
        std::fs::write(&f, b"x").unwrap();
        // As a sandbox's uid 1000 looks on the host, with a set-uid bit.
        std::os::unix::fs::lchown(&f, Some(101000), Some(201000)).unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o4755)).unwrap();
        let mut tar_bytes = Vec::new();
        let paths = vec![f.display().to_string()];
        write_archive(&paths, &mut tar_bytes, Some(shift)).unwrap();
        let mut a = tar::Archive::new(&tar_bytes[..]);
        let entry = a.entries().unwrap().next().unwrap().unwrap();
        assert_eq!(
            (entry.header().uid().unwrap(), entry.header().gid().unwrap()),
            (1000, 1000),
            "archives hold the sandbox's ids"
        );
        let dst = tempfile::tempdir().unwrap();
        extract(&tar_bytes[..], dst.path(), Some(shift)).unwrap();
        let name = f.strip_prefix("/").unwrap();
        let meta = std::fs::symlink_metadata(dst.path().join(name)).unwrap();
        assert_eq!((meta.uid(), meta.gid()), (101000, 201000));
        assert_eq!(meta.mode() & 0o7777, 0o4755, "set-uid kept after the chown");
    }

    #[test]
    fn archive_round_trip_keeps_files_links_and_modes() {
        use std::os::unix::fs::PermissionsExt;
        let src = tempfile::tempdir().unwrap();
        let s = src.path();
        std::fs::create_dir_all(s.join("d/e")).unwrap();
        std::fs::write(s.join("d/e/f.txt"), b"hello").unwrap();
        std::fs::set_permissions(s.join("d/e/f.txt"), std::fs::Permissions::from_mode(0o751))
            .unwrap();
        std::os::unix::fs::symlink("e/f.txt", s.join("d/link")).unwrap();
        std::os::unix::fs::symlink("/", s.join("d/root")).unwrap();
        std::os::unix::fs::symlink("e/./", s.join("d/dir")).unwrap();
        let paths: Vec<String> = [
            "d",
            "d/e",
            "d/e/f.txt",
            "d/link",
            "d/root",
            "d/dir",
            "d/vanished",
        ]
        .iter()
        .map(|p| s.join(p).to_string_lossy().to_string())
        .collect();
        let (dst, (entries, bytes)) = round_trip(paths);
        assert_eq!((entries, bytes), (6, 5));
        let out = dst.path().join(s.strip_prefix("/").unwrap());
        assert_eq!(std::fs::read(out.join("d/e/f.txt")).unwrap(), b"hello");
        let mode = std::fs::metadata(out.join("d/e/f.txt"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o751);
        assert_eq!(
            std::fs::read_link(out.join("d/link")).unwrap(),
            Path::new("e/f.txt")
        );
        assert_eq!(
            std::fs::read_link(out.join("d/root")).unwrap().as_os_str(),
            "/"
        );
        assert_eq!(
            std::fs::read_link(out.join("d/dir")).unwrap().as_os_str(),
            "e/./"
        );
    }

    #[test]
    fn archive_round_trip_keeps_hard_links_fifos_and_xattrs() {
        use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
        let src = tempfile::tempdir().unwrap();
        let s = src.path();
        std::fs::write(s.join("a"), b"shared").unwrap();
        std::fs::hard_link(s.join("a"), s.join("b")).unwrap();
        let fifo = std::ffi::CString::new(s.join("pipe").as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o640) }, 0);
        std::fs::set_permissions(s.join("pipe"), std::fs::Permissions::from_mode(0o640)).unwrap();
        // Not every filesystem has user xattrs (older tmpfs): then that part is skipped.
        let xattrs = xattr::set(s.join("a"), "user.origin", b"warren").is_ok();
        let paths: Vec<String> = ["a", "b", "pipe"]
            .iter()
            .map(|p| s.join(p).to_string_lossy().to_string())
            .collect();

        // Unpacked over older files of the same names: they are replaced.
        let dst = tempfile::tempdir().unwrap();
        let out = dst.path().join(s.strip_prefix("/").unwrap());
        std::fs::create_dir_all(&out).unwrap();
        for n in ["b", "pipe"] {
            std::fs::write(out.join(n), b"old").unwrap();
        }
        let mut tar_bytes = Vec::new();
        write_archive(&paths, &mut tar_bytes, None).unwrap();
        let (entries, bytes) = extract(&tar_bytes[..], dst.path(), None).unwrap();
        assert_eq!((entries, bytes), (3, 6), "the link stores no second copy");

        let (a, b) = (
            std::fs::metadata(out.join("a")).unwrap(),
            std::fs::metadata(out.join("b")).unwrap(),
        );
        assert_eq!(a.ino(), b.ino(), "a and b are one file again");
        assert_eq!(std::fs::read(out.join("b")).unwrap(), b"shared");
        let p = std::fs::symlink_metadata(out.join("pipe")).unwrap();
        assert!(p.file_type().is_fifo());
        assert_eq!(p.permissions().mode() & 0o777, 0o640);
        if xattrs {
            assert_eq!(
                xattr::get(out.join("a"), "user.origin").unwrap().as_deref(),
                Some(&b"warren"[..])
            );
        }
    }

    #[test]
    fn pax_records_count_their_own_length() {
        assert_eq!(pax_record(b"k=v\n"), b"6 k=v\n");
        let long = vec![b'x'; 96];
        let r = pax_record(&long);
        assert_eq!(r.len(), 99);
        assert!(r.starts_with(b"99 "));
        let r = pax_record(&[b'y'; 97]);
        assert_eq!(r.len(), 101);
        assert!(r.starts_with(b"101 "));
    }

    #[test]
    fn archive_paths_must_stay_inside_the_root() {
        assert!(inside(Path::new("/r"), Path::new("a/b")).is_ok());
        assert!(inside(Path::new("/r"), Path::new("../etc")).is_err());
        assert!(inside(Path::new("/r"), Path::new("/etc")).is_err());
    }
}
