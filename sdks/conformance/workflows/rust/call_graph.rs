// Conformance: call_graph and call_node return the child graph's output, once.
use cryosleep::Error;
use cryosleep::serde_json::json;

fn main() -> Result<(), Error> {
    let total = cryosleep::call_graph("conf-tally", &json!({"by": 21}))?;
    println!("graph={total}");
    let node = cryosleep::call_node(
        "state",
        &json!({"op": "incr", "key": "by-node", "entity": "conf-graph", "by": 2}),
        &json!(null),
    )?;
    println!("node={}", node["value"]);
    let bad = json!({"op": "incr", "key": "bad", "entity": "conf-graph", "by": {"$expr": "input.by"}});
    match cryosleep::call_node("state", &bad, &json!({"by": "lots"})) {
        Err(Error::Script { code, .. }) => println!("failed {code}"),
        other => {
            other?;
            println!("no failure");
        }
    }
    Ok(())
}
