// Conformance: the preview-environment shape (deploy, park on an event, tear down).
use cryosleep::serde_json::{json, Value};

fn deploy() -> Value {
    println!("deploying");
    json!({"name": "pr-7", "url": "https://pr-7.preview.test"})
}

fn teardown(env: &Value) -> bool {
    println!("tearing down {}", env["name"].as_str().unwrap_or_default());
    true
}

fn main() -> Result<(), cryosleep::Error> {
    println!("pass");
    let env: Value = cryosleep::step_fn("deploy", deploy)?;
    println!("env={}", env["name"].as_str().unwrap_or_default());
    let closed = cryosleep::wait_event("pr.closed")?;
    println!("closed={closed}");
    let _: bool = cryosleep::step_fn("teardown", || teardown(&env))?;
    println!("done");
    Ok(())
}
