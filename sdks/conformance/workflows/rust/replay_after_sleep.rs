// Conformance: a step_fn recorded before a sleep is replayed after it, not run again.
use std::time::Duration;

fn compute() -> i64 {
    println!("computing");
    41
}

fn main() -> Result<(), cryosleep::Error> {
    println!("pass");
    let value: i64 = cryosleep::step_fn("compute", compute)?;
    println!("value={value}");
    cryosleep::sleep(Duration::from_secs(1))?;
    println!("after sleep value={}", value + 1);
    Ok(())
}
