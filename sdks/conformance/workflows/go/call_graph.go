// Conformance: CallGraph and CallNode return the child graph's output, once.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	cryosleep "cryosleep.io/go"
)

func main() {
	total, err := cryosleep.CallGraph("conf-tally", map[string]any{"by": 21})
	check(err)
	fmt.Printf("graph=%s\n", total)
	raw, err := cryosleep.CallNode("state",
		map[string]any{"op": "incr", "key": "by-node", "entity": "conf-graph", "by": 2}, nil)
	check(err)
	var node struct{ Value int }
	check(json.Unmarshal(raw, &node))
	fmt.Printf("node=%d\n", node.Value)
	var refused *cryosleep.ScriptError
	_, err = cryosleep.CallNode("state", map[string]any{"op": "incr", "key": "bad",
		"entity": "conf-graph", "by": map[string]any{"$expr": "input.by"}}, map[string]any{"by": "lots"})
	if errors.As(err, &refused) {
		fmt.Printf("failed %s\n", refused.Code)
	} else {
		check(err)
		fmt.Println("no failure")
	}
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
