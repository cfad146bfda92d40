// Conformance: a failing step_fn is re-run on the next attempt (the child's retry).
use std::time::Duration;

use cryosleep::serde_json::Value;
use cryosleep::ActivityOptions;

fn main() -> Result<(), cryosleep::Error> {
    let given: Value = cryosleep::input()?;
    let child = format!("{}/flaky_step.child.rs", given["dir"].as_str().unwrap_or_default());
    let mut argv: Vec<&str> = given["child_argv"].as_array().map(|a| a.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
    argv.push(&child);
    let options = ActivityOptions { retries: Some(1), retry_backoff: Some(Duration::from_millis(200)), ..Default::default() };
    let out = cryosleep::activity("flaky", &argv, &options)?;
    print!("{out}");
    println!("collected");
    Ok(())
}
