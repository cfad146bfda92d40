//! Artifacts: files kept with the run (or cached under a key), moved over the agent
//! socket. Its one exception to one JSON line each way: a put's request line says `size`
//! and the file's bytes follow it; a get's reply line says `size` and `sha256` and the
//! bytes follow it. Files move a chunk at a time, and a download replaces its path only
//! once the SHA-256 matched.

use std::fs::{self, File};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};

use sha2::{Digest, Sha256};
use crate::{call, connect, decode_reply, number, opt, text, Error, Result};

const CHUNK: usize = 1 << 20;

/// One artifact as the agent stores or lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Artifact {
    pub name: String,
    pub sha256: String,
    pub size: u64,
    /// The cache key of a cached artifact.
    pub key: Option<String>,
}

impl Artifact {
    fn from(row: &Map<String, Value>) -> Artifact {
        Artifact {
            name: text(row, "name"),
            sha256: text(row, "sha256"),
            size: number(row, "size").max(0) as u64,
            key: row.get("key").and_then(Value::as_str).map(String::from),
        }
    }
}

/// Which artifact a call means: the run's own (the default), the project's cached one
/// under `key`, or (get and list) another `run`'s; `cached` lists the cached ones.
#[derive(Debug, Clone, Default)]
pub struct ArtifactOptions {
    pub key: Option<String>,
    pub run: Option<String>,
    pub cached: bool,
    /// A trusted run's put that untrusted runs may read (docs/security/trust.md).
    pub public: bool,
    /// A trusted run's get or list of what untrusted runs put.
    pub tainted: bool,
}

fn trust(mut request: Value, name: &str, on: bool) -> Value {
    if on {
        request[name] = Value::Bool(true);
    }
    request
}

fn lost(op: &str, e: io::Error) -> Error {
    Error::unavailable(format!("{op}: lost the agent connection ({e})"))
}

fn open(op: &str, request: &Value) -> Result<UnixStream> {
    let path = match std::env::var("CRYO_SOCKET") {
        Ok(p) if !p.is_empty() => p,
        _ => return Err(Error::script("outside_run", format!("{op}: not inside a cryopg run (CRYO_SOCKET is not set)"))),
    };
    let mut stream = connect(&path)?;
    let mut line = serde_json::to_vec(request).map_err(|e| Error::script("not_json", format!("{op}: {e}")))?;
    line.push(b'\n');
    stream.write_all(&line).map_err(|e| lost(op, e))?;
    Ok(stream)
}

fn reply_line(op: &str, reader: &mut impl BufRead) -> Result<Map<String, Value>> {
    let mut raw = Vec::new();
    reader.read_until(b'\n', &mut raw).map_err(|e| lost(op, e))?;
    if raw.iter().all(|b| b.is_ascii_whitespace()) {
        return Err(Error::unavailable(format!("{op}: the agent closed the connection without a reply")));
    }
    decode_reply(op, &raw)
}

/// Store the file at `path` as artifact `name` of this run (or the project's cached
/// artifact with `options.key`). Not journaled: a replay puts the same bytes again, which
/// the store keeps once.
pub fn artifact_put(name: &str, path: impl AsRef<Path>, options: &ArtifactOptions) -> Result<Artifact> {
    let op = "artifact.put";
    let path = path.as_ref();
    let bad = |e: io::Error| Error::script("bad_request", format!("{op}: {}: {e}", path.display()));
    let mut file = File::open(path).map_err(bad)?;
    let meta = file.metadata().map_err(bad)?;
    let size = meta.len();
    // The x bit is kept: a get makes an executable file executable again.
    let executable = meta.permissions().mode() & 0o100 != 0;
    let mut stream = open(op, &trust(trust(json!({"op": op, "name": name, "key": opt(options.key.as_deref()), "size": size}),
                                           "public", options.public), "executable", executable))?;
    let mut buf = vec![0u8; CHUNK];
    let mut left = size;
    while left > 0 {
        let want = (left as usize).min(CHUNK);
        let got = file.read(&mut buf[..want]).map_err(bad)?;
        if got == 0 {
            return Err(Error::script("bad_request", format!("{op}: {} shrank while it was sent", path.display())));
        }
        stream.write_all(&buf[..got]).map_err(|e| lost(op, e))?;
        left -= got as u64;
    }
    let reply = reply_line(op, &mut BufReader::new(&stream))?;
    Ok(Artifact::from(&reply))
}

/// Fetch artifact `name` (this run's, the cached one with `options.key`, or
/// `options.run`'s) into `path` (default: the name's last part); returns the path written.
pub fn artifact_get(name: &str, path: Option<&Path>, options: &ArtifactOptions) -> Result<PathBuf> {
    let op = "artifact.get";
    let dest = path.map_or_else(|| PathBuf::from(name.rsplit('/').next().unwrap_or(name)), Path::to_path_buf);
    let request = json!({"op": op, "name": name, "key": opt(options.key.as_deref()),
                         "run": opt(options.run.as_deref())});
    let stream = open(op, &trust(request, "tainted", options.tainted))?;
    let mut reader = BufReader::with_capacity(CHUNK, &stream);
    let reply = reply_line(op, &mut reader)?;
    let size = number(&reply, "size").max(0) as u64;
    let dir = match dest.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let bad = |e: io::Error| Error::script("bad_request", format!("{op}: {}: {e}", dest.display()));
    fs::create_dir_all(&dir).map_err(bad)?;
    let tmp = dir.join(format!(".artifact-{}-{}", std::process::id(), unique()));
    let result = (|| {
        // A new file's mode less the umask, with x where r is for an executable artifact.
        let mode = if reply.get("executable") == Some(&Value::Bool(true)) { 0o777 } else { 0o666 };
        let mut out = fs::OpenOptions::new().write(true).create_new(true).mode(mode).open(&tmp).map_err(bad)?;
        let mut digest = Sha256::new();
        let mut buf = vec![0u8; CHUNK];
        let mut left = size;
        while left > 0 {
            let want = (left as usize).min(CHUNK);
            let got = reader.read(&mut buf[..want]).map_err(|e| lost(op, e))?;
            if got == 0 {
                return Err(Error::unavailable(format!("{op}: the artifact download stopped short")));
            }
            digest.update(&buf[..got]);
            out.write_all(&buf[..got]).map_err(bad)?;
            left -= got as u64;
        }
        let hex: String = digest.finalize().iter().map(|b| format!("{b:02x}")).collect();
        if hex != text(&reply, "sha256") {
            return Err(Error::unavailable(format!("{op}: the artifact's bytes do not match its SHA-256")));
        }
        fs::rename(&tmp, &dest).map_err(bad)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result.map(|()| dest)
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// This run's artifacts (or `options.run`'s, or with `options.cached` the project's
/// cached ones).
pub fn artifact_list(options: &ArtifactOptions) -> Result<Vec<Artifact>> {
    let reply = call(trust(json!({"op": "artifact.list", "run": opt(options.run.as_deref()), "cached": options.cached}),
                           "tainted", options.tainted))?;
    let rows = reply.get("artifacts").and_then(Value::as_array).cloned().unwrap_or_default();
    Ok(rows.iter().filter_map(Value::as_object).map(Artifact::from).collect())
}
