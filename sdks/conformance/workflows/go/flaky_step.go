// Conformance: a failing StepFn is re-run on the next attempt (the child's retry).
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	cryosleep "cryosleep.io/go"
)

func main() {
	var given struct {
		Dir       string   `json:"dir"`
		ChildArgv []string `json:"child_argv"`
	}
	check(cryosleep.ReadInput(&given))
	child := filepath.Join(given.Dir, "flaky_step.child.go")
	argv := append(append([]string{}, given.ChildArgv...), child)
	out, err := cryosleep.Activity("flaky", argv, cryosleep.ActivityOptions{Retries: 1, RetryBackoff: 200 * time.Millisecond})
	check(err)
	fmt.Print(out)
	fmt.Println("collected")
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
