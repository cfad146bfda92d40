// Child of flaky_step: StepFn `flaky` fails on the first attempt only.
package main

import (
	"errors"
	"fmt"
	"os"

	cryosleep "cryosleep.io/go"
)

var attempt = os.Getenv("CRYO_ATTEMPT")

func before() (int, error) {
	fmt.Println("before ran")
	return 1, nil
}

func flaky() (string, error) {
	fmt.Println("flaky ran")
	if attempt == "1" {
		return "", errors.New("flaky failed on the first attempt")
	}
	return "ok", nil
}

func main() {
	fmt.Printf("attempt %s\n", attempt)
	a, err := cryosleep.StepFn("before", before)
	check(err)
	b, err := cryosleep.StepFn("flaky", flaky)
	check(err)
	fmt.Printf("before=%d flaky=%s\n", a, b)
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
