// Conformance: six step_fn calls on threads replay by identity.
use std::thread;
use std::time::Duration;

fn main() -> Result<(), cryosleep::Error> {
    println!("pass");
    let handles: Vec<_> = (1..=6i64)
        .map(|i| {
            thread::spawn(move || {
                cryosleep::step_fn(&format!("p{i}"), move || {
                    thread::sleep(Duration::from_millis(((7 - i) * 100) as u64)); // last started, first done
                    i
                })
            })
        })
        .collect();
    let mut sum: i64 = 0;
    for handle in handles {
        let value: i64 = handle.join().expect("step thread panicked")?;
        sum += value;
    }
    println!("sum={sum}");
    cryosleep::sleep(Duration::from_secs(1))?;
    println!("after sleep sum={sum}");
    Ok(())
}
