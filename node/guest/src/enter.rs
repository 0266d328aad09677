//! `--enter`: the node started this binary on the host to work on a sandbox's files (see
//! `warren-guest pack`). Before anything else it joins the container's mount namespace and
//! root directory, which the node left open at [`ENTER_NS_FD`] and [`ENTER_ROOT_FD`].

use warren_api::snapshot::{ENTER_NS_FD, ENTER_ROOT_FD};

/// Joins the container. Must run while this process has a single thread.
pub fn enter_container() -> std::io::Result<()> {
    let check = |r: libc::c_int| {
        if r < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(())
        }
    };
    // SAFETY: system calls on the two descriptors the node handed over, then closing them.
    unsafe {
        check(libc::setns(ENTER_NS_FD, libc::CLONE_NEWNS))?;
        check(libc::fchdir(ENTER_ROOT_FD))?;
        check(libc::chroot(c".".as_ptr()))?;
        check(libc::chdir(c"/".as_ptr()))?;
        libc::close(ENTER_NS_FD);
        libc::close(ENTER_ROOT_FD);
    }
    Ok(())
}
