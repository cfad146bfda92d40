//! Replays sdks/conformance/vectors/*.json against a fake agent socket (see the README
//! there): each case makes one SDK call and checks the exact requests and the outcome.
//! The SDK reads its environment, so cases run one at a time under one lock.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixListener;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use cryosleep::serde_json::{self, json, Value};
use cryosleep::{ActivityOptions, Error, SpawnOptions, StateOptions, StepOptions};

static SERIAL: Mutex<()> = Mutex::new(());

fn vectors_dir() -> PathBuf {
    std::env::var_os("CRYO_CONFORMANCE_VECTORS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../conformance/vectors"))
}

fn normalise(v: &Value, fields: &[String]) -> Value {
    let mut v = v.clone();
    for f in fields {
        if let Some(s) = v.get(f).and_then(Value::as_str) {
            if let Ok(decoded) = serde_json::from_str::<Value>(s) {
                v[f.as_str()] = decoded;
            }
        }
    }
    v
}

/// JSON equality with numbers compared by value (2 == 2.0).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(p, q)| same(p, q)),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

struct Agent {
    count: Arc<Mutex<usize>>,
    problems: Arc<Mutex<Vec<String>>>,
    path: PathBuf,
    handle: thread::JoinHandle<()>,
}

fn start_agent(path: &Path, exchanges: Vec<Value>) -> Agent {
    let listener = UnixListener::bind(path).expect("bind fake agent");
    let count = Arc::new(Mutex::new(0usize));
    let problems = Arc::new(Mutex::new(Vec::new()));
    let (c, p) = (count.clone(), problems.clone());
    let handle = thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let mut line = String::new();
            let _ = BufReader::new(&conn).read_line(&mut line);
            if line.trim() == "stop" || line.trim().is_empty() {
                if line.trim() == "stop" {
                    return;
                }
                continue;
            }
            let mut n = c.lock().unwrap();
            let Some(ex) = exchanges.get(*n) else {
                p.lock().unwrap().push(format!("unexpected request {}", line.trim()));
                *n += 1;
                continue;
            };
            *n += 1;
            let fields: Vec<String> = ex["json_fields"]
                .as_array()
                .map(|a| a.iter().filter_map(|s| s.as_str().map(String::from)).collect())
                .unwrap_or_default();
            match serde_json::from_str::<Value>(&line) {
                Ok(req) => {
                    let (got, want) = (normalise(&req, &fields), normalise(&ex["request"], &fields));
                    if !same(&got, &want) {
                        p.lock().unwrap().push(format!("request #{}: got {got}, want {want}", *n));
                    }
                }
                Err(_) => p.lock().unwrap().push(format!("request is not JSON: {line}")),
            }
            if let Some(raw) = ex.get("reply_raw").and_then(Value::as_str) {
                let _ = conn.write_all(raw.as_bytes());
            } else if !ex["reply"].is_null() {
                let _ = conn.write_all(format!("{}\n", ex["reply"]).as_bytes());
            }
        }
    });
    Agent { count, problems, path: path.to_path_buf(), handle }
}

impl Agent {
    fn stop(self) -> (usize, Vec<String>) {
        if let Ok(mut s) = std::os::unix::net::UnixStream::connect(&self.path) {
            let _ = s.write_all(b"stop\n");
        }
        let _ = self.handle.join();
        let count = *self.count.lock().unwrap();
        let problems = self.problems.lock().unwrap().clone();
        (count, problems)
    }
}

fn s<'a>(c: &'a Value, k: &str) -> &'a str {
    c[k].as_str().unwrap_or_default()
}

fn o<'a>(c: &'a Value, k: &str) -> Option<&'a str> {
    c[k].as_str()
}

fn secs(c: &Value, k: &str) -> Duration {
    Duration::from_secs_f64(c[k].as_f64().unwrap())
}

fn argv(c: &Value) -> Vec<String> {
    c["argv"].as_array().unwrap().iter().map(|a| a.as_str().unwrap().to_string()).collect()
}

fn activity_options(c: &Value) -> ActivityOptions {
    ActivityOptions {
        retries: c["retries"].as_u64().map(|n| n as u32),
        retry_backoff: c.get("retry_backoff").map(|_| secs(c, "retry_backoff")),
        retry_on_exit: c["retry_on_exit"]
            .as_array()
            .map(|a| a.iter().map(|n| n.as_i64().unwrap() as i32).collect()),
    }
}

fn state_options(c: &Value) -> StateOptions {
    StateOptions { entity: o(c, "entity").map(String::from), as_name: o(c, "as").map(String::from) }
}

/// A value serde_json cannot encode (a map whose keys are not strings).
fn unencodable() -> BTreeMap<(i32, i32), i32> {
    BTreeMap::from([((1, 2), 3)])
}


fn make_call(c: &Value, fn_calls: &mut u32, dir: &Path) -> Result<Value, Error> {
    let name = s(c, "name");
    let key = s(c, "key");
    let mut argv_owned = if c.get("argv").is_some() { argv(c) } else { vec![] };
    if let Some(script) = c.get("script") {
        // The file written (executable) and its path first.
        use std::os::unix::fs::PermissionsExt;
        let path = dir.join(s(script, "file"));
        std::fs::write(&path, s(script, "source")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        argv_owned.insert(0, path.to_string_lossy().into_owned());
    }
    let argv: Vec<&str> = argv_owned.iter().map(String::as_str).collect();
    let step_options = StepOptions { label: o(c, "label").map(String::from), secrets: vec![] };
    Ok(match s(c, "verb") {
        "step_fn" => {
            if c["returns_unencodable"] == json!(true) {
                let v = cryosleep::step_fn_with(name, &step_options, || {
                    *fn_calls += 1;
                    f64::NAN
                })?;
                json!(v)
            } else {
                let returns = c["returns"].clone();
                let raises = o(c, "raises").map(String::from);
                cryosleep::step_fn_with(name, &step_options, || {
                    *fn_calls += 1;
                    if let Some(msg) = raises {
                        panic!("{msg}");
                    }
                    returns
                })?
            }
        }
        "step" => json!(cryosleep::step_with(name, &argv, &step_options)?),
        "step_unchecked" => {
            let out = cryosleep::step_unchecked_with(name, &argv, &step_options)?;
            json!({"exit_code": out.exit_code, "stdout": out.stdout})
        }
        "sleep" => {
            cryosleep::sleep_secs(c["seconds"].as_f64().unwrap())?;
            Value::Null
        }
        "wait_signal" | "wait_event" => {
            let signal = s(c, "verb") == "wait_signal";
            match (signal, c.get("timeout").is_some()) {
                (true, true) => cryosleep::wait_signal_timeout(name, secs(c, "timeout"))?,
                (true, false) => cryosleep::wait_signal(name)?,
                (false, true) => cryosleep::wait_event_timeout(name, secs(c, "timeout"))?,
                (false, false) => cryosleep::wait_event(name)?,
            }
        }
        "call_graph" => {
            if c["input_unencodable"] == json!(true) {
                cryosleep::call_graph(name, &unencodable())?
            } else {
                cryosleep::call_graph(name, &c["input"])?
            }
        }
        "call_node" => cryosleep::call_node(s(c, "type"), &c["config"], &c["input"])?,
        "emit" => {
            if c["payload_unencodable"] == json!(true) {
                cryosleep::emit(name, &unencodable())?;
            } else {
                cryosleep::emit(name, &c["payload"])?;
            }
            Value::Null
        }
        "spawn" => {
            let path = dir.join(s(c, "file"));
            std::fs::write(&path, s(c, "source")).unwrap();
            let options = SpawnOptions {
                input: c.get("input").cloned(),
                interpreter: o(c, "interpreter").map(String::from),
                source: None,
            };
            json!(cryosleep::spawn(&path, &options)?)
        }
        "annotate" => {
            cryosleep::annotate(s(c, "text"))?;
            Value::Null
        }
        "output_set" => {
            cryosleep::set_output(key, &c["value"])?;
            Value::Null
        }
        "state_get" => cryosleep::state_get::<Value>(key, o(c, "entity"))?.unwrap_or(Value::Null),
        "state_cell" => match cryosleep::state_cell(key, o(c, "entity"))? {
            Some(cell) => json!({"value": cell.value, "version": cell.version}),
            None => Value::Null,
        },
        "state_set" => {
            if c["value_unencodable"] == json!(true) {
                json!(cryosleep::state_set(key, &unencodable(), o(c, "entity"))?)
            } else {
                json!(cryosleep::state_set(key, &c["value"], o(c, "entity"))?)
            }
        }
        "state_delete" => json!(cryosleep::state_delete(key, o(c, "entity"))?),
        "state_list" => Value::Array(
            cryosleep::state_list(o(c, "entity"))?
                .into_iter()
                .map(|cell| json!({"key": cell.key, "value": cell.value, "version": cell.version}))
                .collect(),
        ),
        "state_add" => match c.get("value") {
            Some(v) => json!(cryosleep::state_add_value(key, v, o(c, "entity"))?),
            None => json!(cryosleep::state_add(key, o(c, "entity"))?),
        },
        "state_cas" => json!(cryosleep::state_cas(key, &c["value"], c["expect"].as_i64().unwrap(), &state_options(c))?),
        "state_incr" => json!(cryosleep::state_incr(key, c["by"].as_f64().unwrap_or(1.0), &state_options(c))?),
        "activity_submit" => json!(cryosleep::activity_submit_with(name, &argv, &activity_options(c))?),
        "activity" => json!(cryosleep::activity(name, &argv, &activity_options(c))?),
        "activity_collect" => json!(cryosleep::activity_collect(name)?),
        "activity_wait_all" => json!(cryosleep::activity_wait_all()?),
        "lock" => {
            let body = c["body"].as_array().cloned().unwrap_or_default();
            let raises = c["body_raises"] == json!(true);
            let inner: Result<(), Error> = cryosleep::lock(s(c, "group"), || {
                *fn_calls += 1;
                for call in &body {
                    make_call(call, fn_calls, dir)?;
                }
                if raises {
                    panic!("body failed");
                }
                Ok(())
            })?;
            inner?;
            Value::Null
        }
        "sequence" => {
            let mut results = vec![];
            for call in c["calls"].as_array().unwrap() {
                results.push(make_call(call, fn_calls, dir)?);
            }
            Value::Array(results)
        }
        other => panic!("unknown verb {other}"),
    })
}

enum Outcome {
    Value(Value),
    Error(Error),
    Panic(String),
}

fn check(result: &Value, outcome: &Outcome) -> Result<(), String> {
    if let Some(want) = result.get("value") {
        return match outcome {
            Outcome::Value(got) if same(got, want) => Ok(()),
            Outcome::Value(got) => Err(format!("value: got {got}, want {want}")),
            Outcome::Error(e) => Err(format!("expected a value, got {e:?}")),
            Outcome::Panic(m) => Err(format!("expected a value, got a panic: {m}")),
        };
    }
    let kind = s(result, "error");
    let message = match (kind, outcome) {
        ("FunctionError", Outcome::Panic(m)) => m.clone(),
        ("StepFailed", Outcome::Error(e @ Error::StepFailed { exit_code, .. })) => {
            if let Some(want) = result["exit_code"].as_i64() {
                if *exit_code as i64 != want {
                    return Err(format!("exit code: got {exit_code}, want {want}"));
                }
            }
            e.to_string()
        }
        ("ScriptError", Outcome::Error(e @ Error::Script { code, .. })) => {
            if let Some(want) = result["code"].as_str() {
                if code != want {
                    return Err(format!("code: got {code}, want {want} ({e})"));
                }
            }
            e.to_string()
        }
        ("AgentUnavailable", Outcome::Error(e @ Error::AgentUnavailable { .. })) => e.to_string(),
        ("WaitTimeout", Outcome::Error(e @ Error::WaitTimeout { .. })) => e.to_string(),
        (_, Outcome::Value(v)) => return Err(format!("expected {kind}, got the value {v}")),
        (_, Outcome::Error(e)) => return Err(format!("expected {kind}, got {e:?}")),
        (_, Outcome::Panic(m)) => return Err(format!("expected {kind}, got a panic: {m}")),
    };
    for part in result["message_contains"].as_array().cloned().unwrap_or_default() {
        let part = part.as_str().unwrap();
        if !message.contains(part) {
            return Err(format!("{part:?} not in {message:?}"));
        }
    }
    Ok(())
}

fn run_case(case: &Value) -> Result<(), String> {
    let dir = std::env::temp_dir().join(format!("cryo-rs-{}-{}", std::process::id(), s(case, "id")));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("agent.sock");
    let saved: Vec<(String, Option<String>)> = ["CRYO_SOCKET", "CRYO_CONNECT_ATTEMPTS", "CRYO_CONNECT_BACKOFF_MS", "CRYO_SUSPEND_GRACE_MS"]
        .iter()
        .map(|k| (k.to_string(), std::env::var(k).ok()))
        .collect();
    cryosleep::reset_agent_cache();
    let absent = case["server"] == json!("absent");
    std::env::set_var("CRYO_SOCKET", if absent { dir.join("nobody.sock") } else { path.clone() });
    for (k, v) in case["env"].as_object().cloned().unwrap_or_default() {
        match v.as_str() {
            Some(v) => std::env::set_var(&k, v),
            None => std::env::remove_var(&k),
        }
    }
    let exchanges = case["exchanges"].as_array().cloned().unwrap_or_default();
    let agent = (!absent).then(|| start_agent(&path, exchanges.clone()));
    let mut fn_calls = 0;
    let outcome = match catch_unwind(AssertUnwindSafe(|| make_call(&case["call"], &mut fn_calls, &dir))) {
        Ok(Ok(v)) => Outcome::Value(v),
        Ok(Err(e)) => Outcome::Error(e),
        Err(p) => Outcome::Panic(
            p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default(),
        ),
    };
    let seen = agent.map(Agent::stop);
    for (k, v) in saved {
        match v {
            Some(v) => std::env::set_var(&k, v),
            None => std::env::remove_var(&k),
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    check(&case["result"], &outcome)?;
    if let Some((count, problems)) = seen {
        if !problems.is_empty() {
            return Err(problems.join("; "));
        }
        if count != exchanges.len() {
            return Err(format!("requests: got {count}, want {}", exchanges.len()));
        }
    }
    if let Some(want) = case["fn_calls"].as_u64() {
        if fn_calls as u64 != want {
            return Err(format!("function calls: got {fn_calls}, want {want}"));
        }
    }
    Ok(())
}

fn run_file(name: &str) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let path = vectors_dir().join(format!("{name}.json"));
    let Ok(raw) = std::fs::read_to_string(&path) else {
        panic!("missing vectors file {}", path.display());
    };
    let doc: Value = serde_json::from_str(&raw).unwrap();
    let quiet = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {})); // step_fn / lock bodies panic on purpose
    let mut failures = vec![];
    let cases = doc["cases"].as_array().unwrap();
    for case in cases {
        if let Err(why) = run_case(case) {
            failures.push(format!("{}: {why}", s(case, "id")));
        }
    }
    std::panic::set_hook(quiet);
    assert!(failures.is_empty(), "{} of {} cases failed:\n{}", failures.len(), cases.len(), failures.join("\n"));
}

#[test]
fn vectors_steps() {
    run_file("steps");
}

#[test]
fn vectors_waits() {
    run_file("waits");
}

#[test]
fn vectors_state() {
    run_file("state");
}

#[test]
fn vectors_activities() {
    run_file("activities");
}

#[test]
fn vectors_misc() {
    run_file("misc");
}

#[test]
fn vectors_failures() {
    run_file("failures");
}

#[test]
fn vectors_graphs() {
    run_file("graphs");
}

/// Every vectors file has a test above.
#[test]
fn vectors_all_covered() {
    let known = ["steps", "waits", "state", "activities", "misc", "failures", "graphs"];
    for entry in std::fs::read_dir(vectors_dir()).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if let Some(stem) = name.strip_suffix(".json") {
            assert!(known.contains(&stem), "vectors/{name} has no test in tests/conformance.rs");
        }
    }
}
