// Conformance: the preview-environment shape (deploy, park on an event, tear down).
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"

	cryosleep "cryosleep.io/go"
)

type PreviewEnv struct {
	Name string `json:"name"`
	URL  string `json:"url"`
}

func deploy() (PreviewEnv, error) {
	fmt.Println("deploying")
	return PreviewEnv{Name: "pr-7", URL: "https://pr-7.preview.test"}, nil
}

func teardown(env PreviewEnv) (bool, error) {
	fmt.Printf("tearing down %s\n", env.Name)
	return true, nil
}

func main() {
	fmt.Println("pass")
	env, err := cryosleep.StepFn("deploy", deploy)
	check(err)
	fmt.Printf("env=%s\n", env.Name)
	closed, err := cryosleep.WaitEvent("pr.closed")
	check(err)
	var compact bytes.Buffer
	check(json.Compact(&compact, closed))
	fmt.Println("closed=" + compact.String())
	_, err = cryosleep.StepFn("teardown", func() (bool, error) { return teardown(env) })
	check(err)
	fmt.Println("done")
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
