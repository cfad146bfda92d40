// Conformance: a read-modify-write of an entity cell under a lock, by several runs.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	cryosleep "cryosleep.io/go"
)

func main() {
	err := cryosleep.Lock("conf-tally", func() error {
		raw, err := cryosleep.StateGet("total", cryosleep.Entity("conf-tally"))
		if err != nil {
			return err
		}
		n := 0
		if raw != nil {
			if err := json.Unmarshal(raw, &n); err != nil {
				return err
			}
		}
		time.Sleep(200 * time.Millisecond) // widen the race a missing lock would lose
		_, err = cryosleep.StateSet("total", n+1, cryosleep.Entity("conf-tally"))
		return err
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("done")
}
