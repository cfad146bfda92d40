// Conformance: fan-out of activities, one retried on exit 75.
package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	cryosleep "cryosleep.io/go"
)

func main() {
	for i := 1; i <= 3; i++ {
		_, err := cryosleep.ActivitySubmit(fmt.Sprintf("job-%d", i), "sh", "-c", fmt.Sprintf("echo out-%d", i))
		check(err)
	}
	_, err := cryosleep.ActivitySubmitWith("flaky",
		[]string{"sh", "-c", `if [ "$CRYO_ATTEMPT" -ge 2 ]; then echo "flaky-ok attempt $CRYO_ATTEMPT"; else exit 75; fi`},
		cryosleep.ActivityOptions{Retries: 2, RetryBackoff: 200 * time.Millisecond, RetryOnExit: []int{75}})
	check(err)
	flaky, err := cryosleep.ActivityCollect("flaky")
	check(err)
	failed, err := cryosleep.ActivityWaitAll()
	check(err)
	first, err := cryosleep.ActivityCollect("job-1")
	check(err)
	// Printed only once every wait has been answered, so the log is the same however
	// many passes the waits took.
	fmt.Printf("flaky=%s\n", strings.TrimSpace(flaky))
	fmt.Printf("failed=%d\n", failed)
	fmt.Printf("job-1=%s\n", strings.TrimSpace(first))
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
