//! Reading the files a config names (the config itself, stylesheets, programs, scripts, keys):
//! whole, but never more than a bound, so that a path naming a device (`/dev/zero`) or a huge
//! file is refused with a clear error instead of being read until memory runs out.

use std::io::{self, Read};
use std::path::Path;

/// The most any file a config names may hold: far above any real one.
pub const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// Reads `path` whole, refusing it once it holds more than [`MAX_FILE_BYTES`]. Pipes and
/// process substitutions are read as files are. The error does not repeat the path.
pub fn read(path: &Path) -> io::Result<Vec<u8>> {
    read_at_most(path, MAX_FILE_BYTES)
}

/// [`read`] as UTF-8 text.
pub fn read_to_string(path: &Path) -> io::Result<String> {
    String::from_utf8(read(path)?).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            "stream did not contain valid UTF-8",
        )
    })
}

/// Reads `path` whole, refusing it once it holds more than `limit` bytes.
pub fn read_at_most(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    let file = std::fs::File::open(path)?;
    let meta = file.metadata()?;
    if meta.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::IsADirectory,
            "is a directory",
        ));
    }
    let too_large = || {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "larger than {}, the most a file read here may hold",
                size(limit)
            ),
        )
    };
    if meta.is_file() && meta.len() > limit {
        return Err(too_large());
    }
    let mut bytes = Vec::with_capacity(if meta.is_file() {
        meta.len() as usize
    } else {
        0
    });
    file.take(limit + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(too_large());
    }
    Ok(bytes)
}

/// `limit` in the largest binary unit that writes it whole.
fn size(limit: u64) -> String {
    match limit {
        l if l >= 1 << 20 && l % (1 << 20) == 0 => format!("{} MiB", l >> 20),
        l if l >= 1 << 10 && l % (1 << 10) == 0 => format!("{} KiB", l >> 10),
        l => format!("{l} bytes"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_that_never_ends_is_refused_at_the_limit() {
        let e = read_at_most(Path::new("/dev/zero"), 4096).expect_err("refused");
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(e.to_string().contains("larger than 4 KiB"), "{e}");
    }

    #[test]
    fn files_at_the_limit_are_read_and_one_byte_more_is_refused() {
        let dir = std::env::temp_dir().join(format!("busbar-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("io");
        let at = dir.join("at");
        std::fs::write(&at, vec![b'x'; 1000]).expect("io");
        assert_eq!(read_at_most(&at, 1000).expect("read").len(), 1000);
        let e = read_at_most(&at, 999).expect_err("refused");
        assert!(e.to_string().contains("larger than 999 bytes"), "{e}");
        let e = read(&dir).expect_err("refused");
        assert!(e.to_string().contains("is a directory"), "{e}");
        std::fs::write(&at, [0xff, 0xfe]).expect("io");
        let e = read_to_string(&at).expect_err("refused");
        assert!(e.to_string().contains("valid UTF-8"), "{e}");
        std::fs::remove_dir_all(&dir).expect("io");
    }

    #[test]
    fn a_pipe_is_read_like_a_file() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "printf 'piped' > \"$0\"", "/dev/stdout"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("io");
        let stdout = child.stdout.take().expect("io");
        let fd = std::os::fd::AsRawFd::as_raw_fd(&stdout);
        let path = format!("/proc/self/fd/{fd}");
        assert_eq!(read(Path::new(&path)).expect("read"), b"piped");
        child.wait().expect("io");
    }
}
