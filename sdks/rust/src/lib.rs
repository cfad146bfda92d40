//! Durable workflows for cryopg in Rust.
//!
//! Every function is a durable verb spoken over the agent socket (`$CRYO_SOCKET`). Inside
//! a run a call either answers from the run's journal (a replay) or asks the agent, which
//! records the answer before replying. Calls that wait ([`sleep`], the waits,
//! [`activity_collect`], [`activity_wait_all`], [`lock`]) may instead park the run: the
//! agent stops the process and the program runs again from the top later, so such a call
//! never returns on that pass.
//!
//! Failures are one [`Error`] enum: [`Error::StepFailed`] (a command exited non-zero),
//! [`Error::Script`] (a refused request; deterministic), [`Error::AgentUnavailable`]
//! (the agent went away; never retried) and [`Error::WaitTimeout`] (a bounded wait ran
//! out). A [`step_fn`] closure cannot fail: let a real failure panic, which records
//! nothing, so the step runs again on the next attempt.

use std::collections::HashSet;
use std::fmt;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use serde_core::de::DeserializeOwned;
use serde_core::Serialize;
use serde_json::{json, Map, Value};

pub use serde_json;

mod artifacts;
pub use artifacts::{artifact_get, artifact_list, artifact_put, Artifact, ArtifactOptions};

/// The ways a durable call fails.
#[derive(Debug, Clone, PartialEq)]
pub enum Error {
    /// A step's command (or an activity) ran and exited non-zero. A result of the
    /// workflow, safe to match on; [`step_unchecked`] returns the exit code instead.
    StepFailed { step: String, exit_code: i32, stdout: String },
    /// A refused request: a bad argument, a reused activity name, a value that does not
    /// round-trip through JSON (`not_json`), a call outside a run (`outside_run`), an
    /// agent too old for the verb (`unsupported_verb`), or the agent's own code.
    /// Deterministic: let it fail the run.
    Script { code: String, message: String },
    /// The agent could not be reached or went away mid-call. Never retried; return it so
    /// the process ends and the engine replays the run from the top.
    AgentUnavailable { message: String },
    /// A bounded wait ran out (recorded: a replay times out again). `kind` is `signal`
    /// or `event`.
    WaitTimeout { kind: &'static str, name: String, timeout: Duration },
}

impl Error {
    /// The code of a [`Error::Script`], else `None`.
    pub fn code(&self) -> Option<&str> {
        match self {
            Error::Script { code, .. } => Some(code),
            _ => None,
        }
    }

    fn script(code: &str, message: impl Into<String>) -> Error {
        Error::Script { code: code.to_string(), message: message.into() }
    }

    fn unavailable(message: impl Into<String>) -> Error {
        Error::AgentUnavailable { message: message.into() }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::StepFailed { step, exit_code, .. } => {
                write!(f, "step {step:?} failed with exit code {exit_code}")
            }
            Error::Script { message, .. } | Error::AgentUnavailable { message } => f.write_str(message),
            Error::WaitTimeout { kind, name, timeout } => {
                write!(f, "no {kind} {name:?} arrived within {timeout:?}")
            }
        }
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

// -- transport ---------------------------------------------------------------------------

/// Ops after which the agent may park the run: it stops the script and never answers.
const PARKING: &[&str] =
    &["sleep", "wait.signal", "wait.event", "activity.collect", "activity.wait-all", "lock.acquire",
      "graph.call", "node.call"];

fn int_env(name: &str, fallback: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok()).unwrap_or(fallback)
}

fn connect(path: &str) -> Result<UnixStream> {
    let attempts = int_env("CRYO_CONNECT_ATTEMPTS", 3).max(1);
    let backoff = int_env("CRYO_CONNECT_BACKOFF_MS", 50);
    let mut attempt = 0;
    loop {
        match UnixStream::connect(path) {
            Ok(s) => return Ok(s),
            Err(e) => {
                let transient = matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::WouldBlock
                );
                attempt += 1;
                if !transient || attempt >= attempts {
                    return Err(Error::unavailable(format!("cannot reach the agent at {path} ({e})")));
                }
                std::thread::sleep(Duration::from_millis(backoff << (attempt - 1)));
            }
        }
    }
}

/// Send one request (one JSON line on its own connection) and return its reply. Only
/// connecting is retried; a request that reached the wire is never sent again.
fn call(request: Value) -> Result<Map<String, Value>> {
    let op = request["op"].as_str().unwrap_or("").to_string();
    let path = match std::env::var("CRYO_SOCKET") {
        Ok(p) if !p.is_empty() => p,
        _ => {
            return Err(Error::script(
                "outside_run",
                format!(
                    "{op}: not inside a cryopg run (CRYO_SOCKET is not set); submit the program \
                     with `cryopg submit` or run it under `cryopg dev`"
                ),
            ))
        }
    };
    let parks = PARKING.contains(&op.as_str());
    if parks {
        let _ = std::io::stdout().flush(); // this pass's output belongs in the log
    }
    let mut stream = connect(&path)?;
    let mut line = serde_json::to_vec(&request)
        .map_err(|e| Error::script("not_json", format!("{op}: the request is not JSON: {e}")))?;
    line.push(b'\n');
    if let Err(e) = stream.write_all(&line) {
        return Err(Error::unavailable(format!("{op}: lost the agent connection ({e})")));
    }
    let mut raw = Vec::new();
    if let Err(e) = BufReader::new(&stream).read_until(b'\n', &mut raw) {
        return Err(Error::unavailable(format!("{op}: lost the agent connection ({e})")));
    }
    if raw.iter().all(|b| b.is_ascii_whitespace()) {
        if parks {
            // The agent parked the run and is stopping this process: never return. Still
            // alive after the grace period means the agent went away instead.
            std::thread::sleep(Duration::from_millis(int_env("CRYO_SUSPEND_GRACE_MS", 5000)));
            return Err(Error::unavailable(format!(
                "{op}: the agent closed the connection without a reply and did not stop the program"
            )));
        }
        return Err(Error::unavailable(format!("{op}: the agent closed the connection without a reply")));
    }
    decode_reply(&op, &raw)
}

/// A reply line as the reply, or the matching error kind.
fn decode_reply(op: &str, raw: &[u8]) -> Result<Map<String, Value>> {
    let reply: Map<String, Value> = match serde_json::from_slice(raw) {
        Ok(Value::Object(m)) => m,
        _ => return Err(Error::unavailable(format!("{op}: the agent sent a malformed reply"))),
    };
    if reply.get("ok") == Some(&Value::Bool(true)) {
        return Ok(reply);
    }
    let err = reply.get("error").cloned().unwrap_or(Value::Null);
    let code = err["code"].as_str().unwrap_or("bad_request").to_string();
    let message = err["message"].as_str().unwrap_or("the agent refused the request");
    if code == "engine" {
        // The server behind the agent refused or is unreachable, or this pass is ending.
        return Err(Error::unavailable(format!("{op}: {message}")));
    }
    Err(Error::Script { code, message: format!("{op}: {message}") })
}

static ADVERTISED: Mutex<Option<HashSet<String>>> = Mutex::new(None);

/// Fail at the call site when the agent's `hello` (asked once per process) lacks `verb`.
fn require_verb(verb: &str, what: &str) -> Result<()> {
    let mut cache = ADVERTISED.lock().unwrap_or_else(|e| e.into_inner());
    if cache.is_none() {
        let reply = call(json!({"op": "hello"}))?;
        let verbs = reply
            .get("verbs")
            .and_then(Value::as_array)
            .map(|v| v.iter().filter_map(|s| s.as_str().map(String::from)).collect())
            .unwrap_or_default();
        *cache = Some(verbs);
    }
    if cache.as_ref().is_some_and(|v| v.contains(verb)) {
        return Ok(());
    }
    Err(Error::script(
        "unsupported_verb",
        format!("{what} needs an agent that offers {verb}, and this agent does not list it: upgrade the agent"),
    ))
}

/// Forget what the agent advertised (for tests that run several fake agents).
#[doc(hidden)]
pub fn reset_agent_cache() {
    *ADVERTISED.lock().unwrap_or_else(|e| e.into_inner()) = None;
}

fn to_json<V: Serialize + ?Sized>(what: &str, value: &V) -> Result<Value> {
    serde_json::to_value(value)
        .map_err(|e| Error::script("not_json", format!("{what}: the value does not round-trip through JSON: {e}")))
}

fn opt(s: Option<&str>) -> Value {
    s.map_or(Value::Null, |s| Value::String(s.to_string()))
}

fn text(reply: &Map<String, Value>, key: &str) -> String {
    reply.get(key).and_then(Value::as_str).unwrap_or_default().to_string()
}

fn number(reply: &Map<String, Value>, key: &str) -> i64 {
    reply.get(key).and_then(Value::as_f64).unwrap_or(0.0) as i64
}

fn flag(reply: &Map<String, Value>, key: &str) -> bool {
    reply.get(key).and_then(Value::as_bool).unwrap_or(false)
}

// -- steps -------------------------------------------------------------------------------

/// Options of a step.
#[derive(Debug, Clone, Default)]
pub struct StepOptions {
    /// Shown in the run view beside the step name.
    pub label: Option<String>,
    /// Project secrets a command step needs; the run fails if one is missing.
    pub secrets: Vec<String>,
}

/// Run `f` once and record its result; on every replay return the recorded result
/// without calling `f`. The result must round-trip through JSON, and what is returned
/// is the decoded JSON, on the first pass as on replays. If `f` panics nothing is
/// recorded and the step runs again on the next attempt.
///
/// Do not return a `Result` from `f`: it would be recorded as a successful `{"Err": …}`
/// and never re-run. Return the value and let a real failure panic.
pub fn step_fn<T, F>(name: &str, f: F) -> Result<T>
where
    T: Serialize + DeserializeOwned,
    F: FnOnce() -> T,
{
    step_fn_with(name, &StepOptions::default(), f)
}

/// [`step_fn`] with options (a label).
pub fn step_fn_with<T, F>(name: &str, options: &StepOptions, f: F) -> Result<T>
where
    T: Serialize + DeserializeOwned,
    F: FnOnce() -> T,
{
    let begin = call(json!({"op": "step.begin", "name": name, "label": options.label}))?;
    if flag(&begin, "hit") {
        let exit_code = number(&begin, "exit_code") as i32;
        if exit_code != 0 {
            return Err(Error::StepFailed { step: name.into(), exit_code, stdout: text(&begin, "stdout") });
        }
        return serde_json::from_str(&text(&begin, "stdout")).map_err(|e| {
            Error::script("not_json", format!("step_fn {name:?}: the recorded result does not decode: {e}"))
        });
    }
    let value = f();
    let not_json =
        |why: String| Error::script("not_json", format!("step_fn {name:?}: the result does not round-trip through JSON: {why}"));
    let encoded = serde_json::to_value(&value).map_err(|e| not_json(e.to_string()))?;
    let decoded: T = serde_json::from_value(encoded.clone()).map_err(|e| not_json(e.to_string()))?;
    let again = serde_json::to_value(&decoded).map_err(|e| not_json(e.to_string()))?;
    if again != encoded {
        return Err(not_json(format!("it encodes as {encoded} but decodes back to {again}")));
    }
    call(json!({"op": "step.finish", "call_id": begin.get("call_id").cloned().unwrap_or(Value::Null),
                "stdout": encoded.to_string(), "exit_code": 0}))?;
    Ok(decoded)
}

/// What a command step recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepOutput {
    pub stdout: String,
    pub exit_code: i32,
}

/// Run `argv` as a durable step and return its stdout. A non-zero exit is recorded too
/// and is [`Error::StepFailed`], on this pass and on every replay.
pub fn step(name: &str, argv: &[&str]) -> Result<String> {
    step_with(name, argv, &StepOptions::default())
}

/// [`step`] with options (a label, secrets).
pub fn step_with(name: &str, argv: &[&str], options: &StepOptions) -> Result<String> {
    let out = step_unchecked_with(name, argv, options)?;
    if out.exit_code != 0 {
        return Err(Error::StepFailed { step: name.into(), exit_code: out.exit_code, stdout: out.stdout });
    }
    Ok(out.stdout)
}

/// [`step`] that returns the exit code instead of [`Error::StepFailed`].
pub fn step_unchecked(name: &str, argv: &[&str]) -> Result<StepOutput> {
    step_unchecked_with(name, argv, &StepOptions::default())
}

/// [`step_unchecked`] with options.
pub fn step_unchecked_with(name: &str, argv: &[&str], options: &StepOptions) -> Result<StepOutput> {
    if argv.is_empty() {
        return Err(Error::script("bad_request", format!("step {name:?} needs a command")));
    }
    let mut req = json!({"op": "step.begin", "name": name, "label": options.label});
    if !options.secrets.is_empty() {
        req["secrets"] = json!(options.secrets);
    }
    let begin = call(req)?;
    if flag(&begin, "hit") {
        return Ok(StepOutput { stdout: text(&begin, "stdout"), exit_code: number(&begin, "exit_code") as i32 });
    }
    let out = run_command(argv, &text(&begin, "idempotency_key"));
    call(json!({"op": "step.finish", "call_id": begin.get("call_id").cloned().unwrap_or(Value::Null),
                "stdout": out.stdout, "exit_code": out.exit_code}))?;
    Ok(out)
}

fn run_command(argv: &[&str], key: &str) -> StepOutput {
    use std::os::unix::process::ExitStatusExt;
    let run = |program: &str, args: &[&str]| {
        let mut cmd = Command::new(program);
        // The command gets no agent handles (a nested verb must fail loudly), only its key.
        cmd.args(args)
            .env_clear()
            .envs(std::env::vars_os().filter(|(k, _)| !k.to_string_lossy().starts_with("CRYO_")))
            .env("CRYO_IDEMPOTENCY_KEY", key)
            .stdin(Stdio::inherit())
            .stderr(Stdio::inherit());
        cmd.output()
    };
    let mut ran = run(argv[0], &argv[1..]);
    if matches!(&ran, Err(e) if e.raw_os_error() == Some(ENOEXEC)) {
        // A script without a `#!` line: /bin/sh reads it, as a shell (or execvp) would.
        if let Some(path) = shell_script(argv[0]) {
            let mut args = vec![path.as_str()];
            args.extend_from_slice(&argv[1..]);
            ran = run("/bin/sh", &args);
        }
    }
    match ran {
        Ok(o) => StepOutput {
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            exit_code: o.status.code().unwrap_or_else(|| 128 + o.status.signal().unwrap_or(0)),
        },
        Err(e) => {
            eprintln!("cryosleep step: cannot run {}: {e}", argv[0]);
            let exit_code = if e.kind() == std::io::ErrorKind::PermissionDenied { 126 } else { 127 };
            StepOutput { stdout: String::new(), exit_code }
        }
    }
}

/// errno's "exec format error" on Linux and the BSDs alike.
const ENOEXEC: i32 = 8;

/// The path /bin/sh should read for a program exec refused as no program: a text file (no
/// NUL in its first line, bash's test), found as exec finds it; None for anything else,
/// which stays an exec format error (127).
fn shell_script(program: &str) -> Option<String> {
    use std::io::Read;
    let path = if program.contains('/') {
        std::path::PathBuf::from(program)
    } else {
        std::env::split_paths(&std::env::var_os("PATH")?)
            .map(|dir| dir.join(program))
            .find(|p| p.is_file())?
    };
    let mut head = [0u8; 256];
    let n = std::fs::File::open(&path).ok()?.read(&mut head).ok()?;
    let line = head[..n].split(|b| *b == b'\n').next().unwrap_or(&[]);
    if line.contains(&0) {
        return None;
    }
    Some(path.to_string_lossy().into_owned())
}

// -- waits -------------------------------------------------------------------------------

/// Park the run for `duration`; the agent is freed meanwhile.
pub fn sleep(duration: Duration) -> Result<()> {
    call(json!({"op": "sleep", "seconds": duration.as_secs_f64()})).map(|_| ())
}

/// [`sleep`] for a number of seconds (negative values reach the agent, which refuses them).
pub fn sleep_secs(seconds: f64) -> Result<()> {
    call(json!({"op": "sleep", "seconds": seconds})).map(|_| ())
}

fn wait(kind: &'static str, name: &str, timeout: Option<Duration>) -> Result<Value> {
    wait_with(kind, name, timeout, false)
}

/// Adds a trust opt-in (docs/security/trust.md) to a request only when it is set.
fn with_flag(mut request: Value, name: &str, on: bool) -> Value {
    if on {
        request[name] = Value::Bool(true);
    }
    request
}

fn wait_with(kind: &'static str, name: &str, timeout: Option<Duration>, tainted: bool) -> Result<Value> {
    let op = format!("wait.{kind}");
    if timeout.is_some() {
        require_verb(&op, &format!("wait_{kind}_timeout"))?;
    }
    let request = json!({"op": op, "name": name, "timeout": timeout.map(|t| t.as_secs_f64())});
    let reply = call(with_flag(request, "tainted", tainted))?;
    if flag(&reply, "timed_out") {
        return Err(Error::WaitTimeout { kind, name: name.into(), timeout: timeout.unwrap_or_default() });
    }
    Ok(reply.get("payload").cloned().unwrap_or(Value::Null))
}

/// Park until the named signal arrives and return its payload.
pub fn wait_signal(name: &str) -> Result<Value> {
    wait("signal", name, None)
}

/// [`wait_signal`] bounded by `timeout`; running out is [`Error::WaitTimeout`].
pub fn wait_signal_timeout(name: &str, timeout: Duration) -> Result<Value> {
    wait("signal", name, Some(timeout))
}

/// Park until a project bus event of this name is published after the wait began, and
/// return its payload.
pub fn wait_event(name: &str) -> Result<Value> {
    wait("event", name, None)
}

/// [`wait_event`] bounded by `timeout`; running out is [`Error::WaitTimeout`].
pub fn wait_event_timeout(name: &str, timeout: Duration) -> Result<Value> {
    wait("event", name, Some(timeout))
}

/// [`wait_event`] (bounded when `timeout` is given) that, for a trusted run, also hears
/// untrusted runs' events of the name; an untrusted run hears those and published ones
/// anyway.
pub fn wait_event_tainted(name: &str, timeout: Option<Duration>) -> Result<Value> {
    wait_with("event", name, timeout, true)
}

// -- events, children, activities --------------------------------------------------------

/// Publish an event on the project bus (recorded: a replay does not publish again).
pub fn emit<P: Serialize + ?Sized>(name: &str, payload: &P) -> Result<()> {
    emit_with(name, payload, false)
}

/// [`emit`] published: a trusted run's event reaches untrusted runs waiting on it too.
pub fn emit_public<P: Serialize + ?Sized>(name: &str, payload: &P) -> Result<()> {
    emit_with(name, payload, true)
}

fn emit_with<P: Serialize + ?Sized>(name: &str, payload: &P, public: bool) -> Result<()> {
    let payload = to_json(&format!("emit {name:?} payload"), payload)?;
    call(with_flag(json!({"op": "emit", "name": name, "payload": payload}), "public", public)).map(|_| ())
}

/// Run the stored graph `name` (a cryosleep-graph/v1 workflow) with `input` as a child
/// graph run, wait for it and return its output. The first pass parks until the child
/// ends; replays return the recorded output and start nothing. A child that failed is
/// [`Error::Script`] with code `graph_failed`, carrying the child's error.
pub fn call_graph<I: Serialize + ?Sized>(name: &str, input: &I) -> Result<Value> {
    let input = to_json(&format!("call_graph {name:?} input"), input)?;
    let reply = call(json!({"op": "graph.call", "name": name, "input": input}))?;
    Ok(reply.get("output").cloned().unwrap_or(Value::Null))
}

/// Run one node (a cryosleep-node/v1 document: `node_type` and its `config`) as a child
/// graph run, wait for it and return the node's output; as [`call_graph`] otherwise.
pub fn call_node<C: Serialize + ?Sized, I: Serialize + ?Sized>(
    node_type: &str,
    config: &C,
    input: &I,
) -> Result<Value> {
    let config = to_json(&format!("call_node {node_type:?} config"), config)?;
    let input = to_json(&format!("call_node {node_type:?} input"), input)?;
    let reply = call(json!({"op": "node.call", "type": node_type, "config": config, "input": input}))?;
    Ok(reply.get("output").cloned().unwrap_or(Value::Null))
}

/// Options of [`spawn`].
#[derive(Debug, Clone, Default)]
pub struct SpawnOptions {
    /// The child's input (any JSON).
    pub input: Option<Value>,
    /// The interpreter, when the extension does not say.
    pub interpreter: Option<String>,
    /// The child's source, instead of reading the file.
    pub source: Option<String>,
}

/// Start the workflow in `file` as a child run; returns its run id (recorded by call order).
pub fn spawn(file: impl AsRef<Path>, options: &SpawnOptions) -> Result<String> {
    let file = file.as_ref();
    let source = match &options.source {
        Some(s) => s.clone(),
        None => std::fs::read_to_string(file)
            .map_err(|e| Error::script("bad_request", format!("spawn: cannot read {}: {e}", file.display())))?,
    };
    let filename = file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let reply = call(json!({"op": "spawn", "filename": filename, "source": source,
                            "input": options.input, "interpreter": options.interpreter}))?;
    Ok(text(&reply, "run_id"))
}

/// The retry policy of an activity; `None` fields are not sent.
#[derive(Debug, Clone, Default)]
pub struct ActivityOptions {
    /// Further attempts after a failed one.
    pub retries: Option<u32>,
    /// Wait between attempts.
    pub retry_backoff: Option<Duration>,
    /// Only these exit codes earn a retry.
    pub retry_on_exit: Option<Vec<i32>>,
}

/// Start `argv` as an activity under a name unique in this run; returns the child's run id.
pub fn activity_submit(name: &str, argv: &[&str]) -> Result<String> {
    activity_submit_with(name, argv, &ActivityOptions::default())
}

/// [`activity_submit`] with a retry policy.
pub fn activity_submit_with(name: &str, argv: &[&str], options: &ActivityOptions) -> Result<String> {
    let mut req = json!({"op": "activity.submit", "name": name, "argv": argv});
    if let Some(n) = options.retries {
        req["retries"] = json!(n);
    }
    if let Some(d) = options.retry_backoff {
        req["retry_backoff"] = json!(d.as_secs_f64());
    }
    if let Some(codes) = &options.retry_on_exit {
        req["retry_on"] = json!(codes);
    }
    Ok(text(&call(req)?, "run_id"))
}

/// Wait for a submitted activity and return its stdout; a non-zero exit (after its
/// retries; 130 when cancelled) is [`Error::StepFailed`].
pub fn activity_collect(name: &str) -> Result<String> {
    let reply = call(json!({"op": "activity.collect", "name": name}))?;
    let exit_code = number(&reply, "exit_code") as i32;
    if exit_code != 0 {
        return Err(Error::StepFailed { step: name.into(), exit_code, stdout: text(&reply, "stdout") });
    }
    Ok(text(&reply, "stdout"))
}

/// Wait for every submitted, uncollected activity; returns how many failed.
pub fn activity_wait_all() -> Result<u64> {
    require_verb("activity.wait-all", "activity_wait_all")?;
    let reply = call(json!({"op": "activity.wait-all"}))?;
    Ok(number(&reply, "failed").max(0) as u64)
}

/// Submit, wait and collect in one call.
pub fn activity(name: &str, argv: &[&str], options: &ActivityOptions) -> Result<String> {
    activity_submit_with(name, argv, options)?;
    activity_collect(name)
}

// -- notes, outputs, input ---------------------------------------------------------------

/// Attach a markdown note to the run page (every pass adds it again).
pub fn annotate(text: &str) -> Result<()> {
    call(json!({"op": "annotate", "text": text})).map(|_| ())
}

/// Set one of the run's outputs (every pass sets it again).
pub fn set_output<V: Serialize + ?Sized>(key: &str, value: &V) -> Result<()> {
    let value = to_json(&format!("set_output {key:?} value"), value)?;
    call(json!({"op": "output.set", "key": key, "value": value})).map(|_| ())
}

/// The run's input decoded as `T` (JSON `null` when submitted without one).
pub fn input<T: DeserializeOwned>() -> Result<T> {
    let path = std::env::var("CRYO_INPUT_FILE")
        .map_err(|_| Error::script("outside_run", "input: not inside a cryopg run (CRYO_INPUT_FILE is not set)"))?;
    let raw = std::fs::read_to_string(&path).map_err(|e| Error::script("outside_run", format!("input: {e}")))?;
    serde_json::from_str(&raw).map_err(|e| Error::script("not_json", format!("input does not decode: {e}")))
}

// -- state -------------------------------------------------------------------------------

/// A state cell's value and version.
#[derive(Debug, Clone, PartialEq)]
pub struct Cell {
    pub value: Value,
    pub version: i64,
}

/// A cell as [`state_list`] returns it.
#[derive(Debug, Clone, PartialEq)]
pub struct ListedCell {
    pub key: String,
    pub value: Value,
    pub version: i64,
}

/// A cell's value decoded as `T`, or `None` when unset. `entity` names the project-wide
/// entity scope; `None` is this run's own scope.
pub fn state_get<T: DeserializeOwned>(key: &str, entity: Option<&str>) -> Result<Option<T>> {
    state_get_with(key, entity, false)
}

/// [`state_get`] of the cell untrusted runs wrote (for a trusted run; docs/security/trust.md).
pub fn state_get_tainted<T: DeserializeOwned>(key: &str, entity: Option<&str>) -> Result<Option<T>> {
    state_get_with(key, entity, true)
}

fn state_get_with<T: DeserializeOwned>(key: &str, entity: Option<&str>, tainted: bool) -> Result<Option<T>> {
    match state_cell_with(key, entity, tainted)? {
        None => Ok(None),
        Some(cell) => serde_json::from_value(cell.value)
            .map(Some)
            .map_err(|e| Error::script("not_json", format!("state_get {key:?}: the value does not decode: {e}"))),
    }
}

/// A cell's value and version (for [`state_cas`]), or `None` when unset.
pub fn state_cell(key: &str, entity: Option<&str>) -> Result<Option<Cell>> {
    state_cell_with(key, entity, false)
}

/// [`state_cell`] of the cell untrusted runs wrote (for a trusted run).
pub fn state_cell_tainted(key: &str, entity: Option<&str>) -> Result<Option<Cell>> {
    state_cell_with(key, entity, true)
}

fn state_cell_with(key: &str, entity: Option<&str>, tainted: bool) -> Result<Option<Cell>> {
    let request = json!({"op": "state.get", "key": key, "entity": opt(entity)});
    let reply = call(with_flag(request, "tainted", tainted))?;
    if !flag(&reply, "found") {
        return Ok(None);
    }
    Ok(Some(Cell { value: reply.get("value").cloned().unwrap_or(Value::Null), version: number(&reply, "version") }))
}

/// Write a cell; returns its new version.
pub fn state_set<V: Serialize + ?Sized>(key: &str, value: &V, entity: Option<&str>) -> Result<i64> {
    state_set_with(key, value, entity, false)
}

/// [`state_set`] published: untrusted runs may read a trusted run's entity cell (until a
/// later set without it).
pub fn state_set_public<V: Serialize + ?Sized>(key: &str, value: &V, entity: Option<&str>) -> Result<i64> {
    state_set_with(key, value, entity, true)
}

fn state_set_with<V: Serialize + ?Sized>(key: &str, value: &V, entity: Option<&str>, public: bool) -> Result<i64> {
    let value = to_json(&format!("state_set {key:?} value"), value)?;
    let request = json!({"op": "state.set", "key": key, "entity": opt(entity), "value": value});
    let reply = call(with_flag(request, "public", public))?;
    Ok(number(&reply, "version"))
}

/// Delete a cell; true when there was one.
pub fn state_delete(key: &str, entity: Option<&str>) -> Result<bool> {
    let reply = call(json!({"op": "state.delete", "key": key, "entity": opt(entity)}))?;
    Ok(flag(&reply, "deleted"))
}

/// Every cell of the scope, in key order.
pub fn state_list(entity: Option<&str>) -> Result<Vec<ListedCell>> {
    state_list_with(entity, false)
}

/// [`state_list`] of the cells untrusted runs wrote (for a trusted run).
pub fn state_list_tainted(entity: Option<&str>) -> Result<Vec<ListedCell>> {
    state_list_with(entity, true)
}

fn state_list_with(entity: Option<&str>, tainted: bool) -> Result<Vec<ListedCell>> {
    let reply = call(with_flag(json!({"op": "state.list", "entity": opt(entity)}), "tainted", tainted))?;
    let cells = reply.get("cells").and_then(Value::as_array).cloned().unwrap_or_default();
    Ok(cells
        .into_iter()
        .map(|c| ListedCell {
            key: c["key"].as_str().unwrap_or_default().to_string(),
            value: c["value"].clone(),
            version: c["version"].as_f64().unwrap_or(0.0) as i64,
        })
        .collect())
}

/// Claim a cell (writing `true`) if nobody has; recorded, so a replay gives the same
/// answer. True when this run won it.
pub fn state_add(key: &str, entity: Option<&str>) -> Result<bool> {
    state_add_value(key, &true, entity)
}

/// [`state_add`] writing `value` when it wins.
pub fn state_add_value<V: Serialize + ?Sized>(key: &str, value: &V, entity: Option<&str>) -> Result<bool> {
    let value = to_json(&format!("state_add {key:?} value"), value)?;
    require_verb("state.add", "state_add")?;
    let reply = call(json!({"op": "state.add", "key": key, "entity": opt(entity), "value": value}))?;
    Ok(flag(&reply, "claimed"))
}

/// Options of [`state_cas`] and [`state_incr`].
#[derive(Debug, Clone, Default)]
pub struct StateOptions {
    /// The entity scope (`None`: this run's own).
    pub entity: Option<String>,
    /// The name this call is recorded under (default: the key); a run may use it once.
    pub as_name: Option<String>,
}

/// Write `value` only if the cell is still at version `expect`; true when it swapped.
pub fn state_cas<V: Serialize + ?Sized>(key: &str, value: &V, expect: i64, options: &StateOptions) -> Result<bool> {
    let value = to_json(&format!("state_cas {key:?} value"), value)?;
    let mut req = json!({"op": "state.cas", "key": key, "entity": options.entity, "value": value, "expect": expect});
    if let Some(a) = &options.as_name {
        req["as"] = json!(a);
    }
    Ok(flag(&call(req)?, "swapped"))
}

/// Add `by` to a numeric cell and return the total.
pub fn state_incr(key: &str, by: f64, options: &StateOptions) -> Result<f64> {
    let mut req = json!({"op": "state.incr", "key": key, "entity": options.entity, "by": by});
    if let Some(a) = &options.as_name {
        req["as"] = json!(a);
    }
    let reply = call(req)?;
    Ok(reply.get("value").and_then(Value::as_f64).unwrap_or(0.0))
}

// -- lock --------------------------------------------------------------------------------

/// Hold the project-wide lease `group` while `body` runs, and release it when the body
/// returns (or panics, before the panic goes on). On a held group the run parks until
/// the lease is granted. Returns what the body returned.
pub fn lock<T, F: FnOnce() -> T>(group: &str, body: F) -> Result<T> {
    call(json!({"op": "lock.acquire", "group": group, "scoped": true}))?;
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body));
    let released = call(json!({"op": "lock.release", "group": group}));
    match outcome {
        Ok(value) => released.map(|_| value),
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// Reads a duration as the CLI takes it: a number of seconds (`"10"`, `"0.5"`) or a
/// number with a unit `ms`, `s`, `m`, `h` or `d` (`"30s"`, `"5m"`, `"1.5h"`, `"500ms"`),
/// for [`sleep`] and the timeouts, which take a [`Duration`]. A malformed one is
/// [`Error::Script`] `bad_request`.
pub fn parse_duration(text: &str) -> Result<Duration> {
    let raw = text.trim().to_ascii_lowercase();
    let unit = ["ms", "s", "m", "h", "d"].into_iter().find(|u| raw.ends_with(u)).unwrap_or("");
    let number = raw[..raw.len() - unit.len()].trim();
    let scale = match unit {
        "ms" => 0.001,
        "m" => 60.0,
        "h" => 3600.0,
        "d" => 86400.0,
        _ => 1.0,
    };
    let digits = !number.is_empty() && number.chars().all(|c| c.is_ascii_digit() || c == '.');
    match number.parse::<f64>() {
        Ok(value) if digits => Ok(Duration::from_secs_f64(value * scale)),
        _ => Err(Error::Script {
            code: "bad_request".into(),
            message: format!(
                "invalid duration {text:?}: expected a non-negative number with an optional unit ms, s, m, h or d"
            ),
        }),
    }
}

#[cfg(test)]
mod duration_tests {
    use super::*;

    #[test]
    fn durations_read_as_the_cli_reads_them() {
        assert_eq!(parse_duration("10").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(parse_duration("1.5h").unwrap(), Duration::from_secs(5400));
        for bad in ["1x", "-1s", "", "soon", "1..2s"] {
            assert!(parse_duration(bad).is_err(), "{bad} accepted");
        }
    }
}
