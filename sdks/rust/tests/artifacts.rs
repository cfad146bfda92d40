//! artifact_put/get/list against a fake agent that speaks the socket's byte framing. One
//! test function: CRYO_SOCKET is process-wide and tests of one binary run in threads.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread;

use cryosleep::serde_json::{self, json, Value};
use cryosleep::{artifact_get, artifact_list, artifact_put, Artifact, ArtifactOptions, Error};

type Seen = Arc<Mutex<Vec<(Value, Vec<u8>)>>>;

/// Serves connections until dropped: `handle(request, bytes after the line)` answers.
fn agent(dir: &Path, handle: impl Fn(&Value, &[u8]) -> Vec<u8> + Send + 'static) -> Seen {
    let path = dir.join("agent.sock");
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path).unwrap();
    std::env::set_var("CRYO_SOCKET", &path);
    let seen: Seen = Arc::default();
    let log = seen.clone();
    thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let mut reader = BufReader::new(conn.try_clone().unwrap());
            let mut line = Vec::new();
            reader.read_until(b'\n', &mut line).unwrap();
            let req: Value = serde_json::from_slice(&line).unwrap();
            let mut body = vec![0u8; req["size"].as_u64().unwrap_or(0) as usize];
            if req["op"] == "artifact.put" {
                reader.read_exact(&mut body).unwrap();
            }
            let answer = handle(&req, &body);
            log.lock().unwrap().push((req, body));
            let _ = conn.write_all(&answer);
        }
    });
    seen
}

fn line(v: Value) -> Vec<u8> {
    let mut out = serde_json::to_vec(&v).unwrap();
    out.push(b'\n');
    out
}

/// sha256sum, as the tests' independent reference.
fn sha(data: &[u8]) -> String {
    use std::process::{Command, Stdio};
    let mut child = Command::new("sha256sum").stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(data).unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8(out.stdout).unwrap().split_whitespace().next().unwrap().to_string()
}

fn tmpdir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("cryo-rs-art-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn artifacts_over_the_socket() {
    let mut data = vec![7u8; 3 << 20];
    data.extend_from_slice(b"end");
    let digest = sha(&data);

    // put: the line, then the bytes
    let dir = tmpdir("put");
    let seen = agent(&dir, |req, body| {
        line(json!({"ok": true, "name": req["name"], "sha256": sha(body), "size": body.len(), "key": req["key"]}))
    });
    let file = dir.join("data.bin");
    std::fs::write(&file, &data).unwrap();
    let options = ArtifactOptions { key: Some("lock-1".into()), ..Default::default() };
    let got = artifact_put("dist/data", &file, &options).unwrap();
    assert_eq!(got, Artifact { name: "dist/data".into(), sha256: digest.clone(), size: data.len() as u64,
                               key: Some("lock-1".into()) });
    let (req, body) = seen.lock().unwrap()[0].clone();
    assert_eq!(req, json!({"op": "artifact.put", "name": "dist/data", "key": "lock-1", "size": data.len()}));
    assert_eq!(body, data);

    // get: only bytes that match land at the path
    let dir = tmpdir("get");
    let sent = Arc::new(Mutex::new(data.clone()));
    let (reply_data, reply_digest) = (sent.clone(), digest.clone());
    let size = data.len();
    let seen = agent(&dir, move |_, _| {
        let mut out = line(json!({"ok": true, "size": size, "sha256": reply_digest}));
        out.extend_from_slice(&reply_data.lock().unwrap());
        out
    });
    let dest = dir.join("out").join("copy.bin");
    let run = ArtifactOptions { run: Some("dev:default:run-1".into()), ..Default::default() };
    assert_eq!(artifact_get("data", Some(&dest), &run).unwrap(), dest);
    assert_eq!(std::fs::read(&dest).unwrap(), data);
    assert_eq!(seen.lock().unwrap()[0].0,
               json!({"op": "artifact.get", "name": "data", "key": null, "run": "dev:default:run-1"}));
    let other = dir.join("other.bin");
    let mut wrong = data[1..].to_vec();
    wrong.push(b'x');
    *sent.lock().unwrap() = wrong;
    let err = artifact_get("data", Some(&other), &ArtifactOptions::default()).unwrap_err();
    assert!(matches!(err, Error::AgentUnavailable { .. }), "{err}");
    *sent.lock().unwrap() = data[10..].to_vec();
    let err = artifact_get("data", Some(&other), &ArtifactOptions::default()).unwrap_err();
    assert!(err.to_string().contains("stopped short"), "{err}");
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(left.iter().all(|n| n == "out" || n == "agent.sock"), "{left:?}");

    // a refusal is a Script error with the agent's code; list returns the rows
    let dir = tmpdir("list");
    let seen = agent(&dir, |req, _| {
        if req["op"] == "artifact.list" {
            line(json!({"ok": true, "artifacts": [{"name": "a", "sha256": "ab", "size": 1}]}))
        } else {
            line(json!({"ok": false, "error": {"code": "artifact_quota", "message": "over the bound"}}))
        }
    });
    let file = dir.join("a");
    std::fs::write(&file, b"a").unwrap();
    let err = artifact_put("a", &file, &ArtifactOptions::default()).unwrap_err();
    assert_eq!(err.code(), Some("artifact_quota"));
    let cached = ArtifactOptions { cached: true, ..Default::default() };
    let rows = artifact_list(&cached).unwrap();
    assert_eq!(rows, vec![Artifact { name: "a".into(), sha256: "ab".into(), size: 1, key: None }]);
    assert_eq!(seen.lock().unwrap()[1].0, json!({"op": "artifact.list", "run": null, "cached": true}));
    for tag in ["put", "get", "list"] {
        let _ = std::fs::remove_dir_all(tmpdir(tag));
    }
}
