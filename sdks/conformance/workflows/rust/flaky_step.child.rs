// Child of flaky_step: step_fn `flaky` panics on the first attempt only (a panic records
// nothing, so the step runs again on the next attempt).
fn main() -> Result<(), cryosleep::Error> {
    let attempt = std::env::var("CRYO_ATTEMPT").unwrap_or_default();
    println!("attempt {attempt}");
    let a: i64 = cryosleep::step_fn("before", || {
        println!("before ran");
        1
    })?;
    let b: String = cryosleep::step_fn("flaky", || {
        println!("flaky ran");
        if attempt == "1" {
            panic!("flaky failed on the first attempt");
        }
        "ok".to_string()
    })?;
    println!("before={a} flaky={b}");
    Ok(())
}
