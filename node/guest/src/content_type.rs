//! Content type of a file from its first bytes, with the file name as a hint for text.

/// How many leading bytes [`detect`] looks at.
pub const SNIFF_LEN: usize = 8192;

/// Magic numbers first (images, archives, executables…); then UTF-8 text, typed by extension
/// when the extension names a text format; otherwise `application/octet-stream`.
pub fn detect(head: &[u8], path: &str) -> String {
    if let Some(kind) = infer::get(head) {
        let mime = kind.mime_type();
        return if mime.starts_with("text/") && looks_like_text(head) {
            format!("{mime}; charset=utf-8")
        } else {
            mime.to_string()
        };
    }
    let by_ext = mime_guess::from_path(path).first();
    if looks_like_text(head) {
        if let Some(m) = &by_ext {
            let essence = m.essence_str();
            if is_text_type(essence) {
                return if m.type_() == mime_guess::mime::TEXT {
                    format!("{essence}; charset=utf-8")
                } else {
                    essence.to_string()
                };
            }
        }
        return "text/plain; charset=utf-8".to_string();
    }
    match by_ext {
        Some(m) if !is_text_type(m.essence_str()) => m.essence_str().to_string(),
        _ => "application/octet-stream".to_string(),
    }
}

fn is_text_type(essence: &str) -> bool {
    essence.starts_with("text/")
        || matches!(
            essence,
            "application/json"
                | "application/javascript"
                | "application/xml"
                | "application/x-sh"
                | "application/toml"
                | "application/yaml"
                | "application/x-yaml"
                | "image/svg+xml"
        )
}

/// UTF-8 without NUL bytes (a character cut at the end of the sample is fine).
fn looks_like_text(head: &[u8]) -> bool {
    if head.contains(&0) {
        return false;
    }
    match std::str::from_utf8(head) {
        Ok(_) => true,
        Err(e) => e.error_len().is_none() && head.len() - e.valid_up_to() < 4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn magic_beats_extension() {
        let png = [0x89, b'P', b'N', b'G', 0x0D, 0x0A, 0x1A, 0x0A, 0, 0, 0, 13];
        assert_eq!(detect(&png, "/x/file.txt"), "image/png");
        let mut elf = vec![0u8; 64];
        elf[..4].copy_from_slice(b"\x7fELF");
        assert_eq!(detect(&elf, "/bin/x.txt"), "application/x-executable");
    }

    #[test]
    fn text_by_extension_or_plain() {
        assert_eq!(detect(b"{\"a\": 1}", "/a.json"), "application/json");
        assert_eq!(
            detect(b"<html></html>", "/a.html"),
            "text/html; charset=utf-8"
        );
        assert_eq!(detect(b"hello", "/notes"), "text/plain; charset=utf-8");
        assert_eq!(
            detect("h\u{e9}".as_bytes(), "/n"),
            "text/plain; charset=utf-8"
        );
        assert_eq!(
            detect(&"é".as_bytes()[..1], "/n"),
            "text/plain; charset=utf-8"
        );
    }

    #[test]
    fn binary_is_octet_stream() {
        assert_eq!(
            detect(&[0u8, 1, 2, 255, 254], "/data.bin"),
            "application/octet-stream"
        );
        assert_eq!(
            detect(&[0u8, 1, 2, 255], "/data.txt"),
            "application/octet-stream"
        );
    }
}
