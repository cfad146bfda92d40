// Conformance: fan-out of activities, one retried on exit 75.
use std::time::Duration;

use cryosleep::ActivityOptions;

fn main() -> Result<(), cryosleep::Error> {
    for i in 1..=3 {
        cryosleep::activity_submit(&format!("job-{i}"), &["sh", "-c", &format!("echo out-{i}")])?;
    }
    let retry = ActivityOptions {
        retries: Some(2),
        retry_backoff: Some(Duration::from_millis(200)),
        retry_on_exit: Some(vec![75]),
    };
    cryosleep::activity_submit_with(
        "flaky",
        &["sh", "-c", r#"if [ "$CRYO_ATTEMPT" -ge 2 ]; then echo "flaky-ok attempt $CRYO_ATTEMPT"; else exit 75; fi"#],
        &retry,
    )?;
    let flaky = cryosleep::activity_collect("flaky")?;
    let failed = cryosleep::activity_wait_all()?;
    let first = cryosleep::activity_collect("job-1")?;
    // Printed only once every wait has been answered, so the log is the same however many
    // passes the waits took.
    println!("flaky={}", flaky.trim());
    println!("failed={failed}");
    println!("job-1={}", first.trim());
    Ok(())
}
