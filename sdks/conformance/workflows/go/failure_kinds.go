// Conformance: the three failure kinds and the bad inputs, replayed over three passes.
package main

import (
	"errors"
	"fmt"
	"math"
	"os"
	"time"

	cryosleep "cryosleep.io/go"
)

func main() {
	fmt.Println("pass")
	probe, err := cryosleep.StepUnchecked("probe", []string{"sh", "-c", "exit 3"})
	check(err)
	fmt.Printf("unchecked=%d\n", probe.ExitCode)

	var failed *cryosleep.StepFailed
	if _, err := cryosleep.Step("fails", []string{"sh", "-c", "exit 4"}); errors.As(err, &failed) {
		fmt.Printf("step failed exit=%d\n", failed.ExitCode)
	} else {
		check(err)
	}

	_, err = cryosleep.ActivitySubmit("dup", "true")
	check(err)
	var refused *cryosleep.ScriptError
	if _, err := cryosleep.ActivitySubmit("dup", "true"); errors.As(err, &refused) {
		fmt.Printf("script error %s\n", refused.Code)
	} else {
		check(err)
	}

	var timedOut *cryosleep.WaitTimeout
	if _, err := cryosleep.WaitSignalTimeout("nudge", 500*time.Millisecond); errors.As(err, &timedOut) {
		fmt.Println("signal timed out")
	} else {
		check(err)
	}

	if err := cryosleep.Sleep(500 * time.Millisecond); err != nil {
		fmt.Println("swallowed") // never printed: a parking call does not return on its pass
	}

	// Last, after every park: a StepFn that failed records nothing, so durable calls after
	// it would sit one position earlier on the replay, which strict replay refuses.
	if _, err := cryosleep.StepFn("bad", func() (float64, error) { return math.NaN(), nil }); errors.As(err, &refused) {
		fmt.Printf("not json %s\n", refused.Code)
	} else {
		check(err)
	}
	fmt.Println("done")
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
