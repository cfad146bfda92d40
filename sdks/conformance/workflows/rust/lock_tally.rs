// Conformance: a read-modify-write of an entity cell under a lock, by several runs.
use std::time::Duration;

fn main() -> Result<(), cryosleep::Error> {
    cryosleep::lock("conf-tally", || -> Result<(), cryosleep::Error> {
        let n: i64 = cryosleep::state_get("total", Some("conf-tally"))?.unwrap_or(0);
        std::thread::sleep(Duration::from_millis(200)); // widen the race a missing lock would lose
        cryosleep::state_set("total", &(n + 1), Some("conf-tally"))?;
        Ok(())
    })??;
    println!("done");
    Ok(())
}
