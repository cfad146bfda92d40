// Conformance: a StepFn recorded before a sleep is replayed after it, not run again.
package main

import (
	"fmt"
	"os"
	"time"

	cryosleep "cryosleep.io/go"
)

func compute() (int, error) {
	fmt.Println("computing")
	return 41, nil
}

func main() {
	fmt.Println("pass")
	value, err := cryosleep.StepFn("compute", compute)
	check(err)
	fmt.Printf("value=%d\n", value)
	check(cryosleep.Sleep(time.Second))
	fmt.Printf("after sleep value=%d\n", value+1)
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
