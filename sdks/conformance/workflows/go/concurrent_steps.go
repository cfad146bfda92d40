// Conformance: six StepFn calls in goroutines replay by identity.
package main

import (
	"fmt"
	"os"
	"sync"
	"time"

	cryosleep "cryosleep.io/go"
)

func main() {
	fmt.Println("pass")
	values := make([]int, 6)
	errs := make([]error, 6)
	var wg sync.WaitGroup
	for i := 1; i <= 6; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			values[i-1], errs[i-1] = cryosleep.StepFn(fmt.Sprintf("p%d", i), func() (int, error) {
				time.Sleep(time.Duration(7-i) * 100 * time.Millisecond) // last started, first done
				return i, nil
			})
		}(i)
	}
	wg.Wait()
	sum := 0
	for i := range values {
		check(errs[i])
		sum += values[i]
	}
	fmt.Printf("sum=%d\n", sum)
	check(cryosleep.Sleep(time.Second))
	fmt.Printf("after sleep sum=%d\n", sum)
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
