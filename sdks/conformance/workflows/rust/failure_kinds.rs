// Conformance: the three failure kinds and the bad inputs, replayed over three passes.
use std::time::Duration;

use cryosleep::Error;

fn main() -> Result<(), Error> {
    println!("pass");
    println!("unchecked={}", cryosleep::step_unchecked("probe", &["sh", "-c", "exit 3"])?.exit_code);
    match cryosleep::step("fails", &["sh", "-c", "exit 4"]) {
        Err(Error::StepFailed { exit_code, .. }) => println!("step failed exit={exit_code}"),
        other => {
            other?;
        }
    }
    cryosleep::activity_submit("dup", &["true"])?;
    match cryosleep::activity_submit("dup", &["true"]) {
        Err(Error::Script { code, .. }) => println!("script error {code}"),
        other => {
            other?;
        }
    }
    match cryosleep::wait_signal_timeout("nudge", Duration::from_millis(500)) {
        Err(Error::WaitTimeout { .. }) => println!("signal timed out"),
        other => {
            other?;
        }
    }
    if cryosleep::sleep(Duration::from_millis(500)).is_err() {
        println!("swallowed"); // never printed: a parking call does not return on its pass
    }
    // Last, after every park: a step_fn that failed records nothing, so durable calls after
    // it would sit one position earlier on the replay, which strict replay refuses.
    match cryosleep::step_fn("bad", || f64::NAN) {
        Err(Error::Script { code, .. }) => println!("not json {code}"),
        other => {
            other?;
        }
    }
    println!("done");
    Ok(())
}
