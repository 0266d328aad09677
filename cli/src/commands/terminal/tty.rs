//! The local terminal: raw mode for the time the command runs, and its size.

/// Raw mode on a terminal file descriptor, restored when dropped.
pub struct RawMode {
    fd: i32,
    saved: libc::termios,
}

impl RawMode {
    /// Puts `fd` in raw mode; `None` when it is not a terminal (a pipe, a file).
    pub fn enable(fd: i32) -> std::io::Result<Option<RawMode>> {
        if unsafe { libc::isatty(fd) } != 1 {
            return Ok(None);
        }
        let mut saved: libc::termios = unsafe { std::mem::zeroed() };
        if unsafe { libc::tcgetattr(fd, &mut saved) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut raw = saved;
        unsafe { libc::cfmakeraw(&mut raw) };
        if unsafe { libc::tcsetattr(fd, libc::TCSANOW, &raw) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Some(RawMode { fd, saved }))
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        unsafe { libc::tcsetattr(self.fd, libc::TCSANOW, &self.saved) };
    }
}

/// The size of the terminal on `fd` as (cols, rows); `None` when it is not a terminal or
/// reports no size.
pub fn size(fd: i32) -> Option<(u16, u16)> {
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    if unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &mut ws) } != 0 || ws.ws_col == 0 {
        return None;
    }
    Some((ws.ws_col, ws.ws_row))
}
