package cryosleep

import (
	"fmt"
	"time"
)

// StepFailed: a step's command (or an activity) ran and exited non-zero. A result of the
// workflow, safe to branch on; StepUnchecked returns the exit code instead.
type StepFailed struct {
	Step     string
	ExitCode int
	Stdout   string
}

func (e *StepFailed) Error() string {
	return fmt.Sprintf("step %q failed with exit code %d", e.Step, e.ExitCode)
}

// ScriptError: the request was refused or could not be made - a bad argument, a reused
// activity name, a value that does not round-trip through JSON (Code "not_json"), a call
// outside a run ("outside_run"), an agent too old for the verb ("unsupported_verb"), or
// any agent refusal under the agent's own code. Deterministic: let it fail the run.
type ScriptError struct {
	Code    string
	Message string
}

func (e *ScriptError) Error() string { return e.Message }

// AgentUnavailable: the agent could not be reached, or went away while the call was on
// the wire. Never retried by the SDK; return it so the process ends and the engine
// replays the run from the top.
type AgentUnavailable struct {
	Message string
}

func (e *AgentUnavailable) Error() string { return e.Message }

// WaitTimeout: a bounded wait (WaitSignalTimeout / WaitEventTimeout) ran out. Recorded,
// so a replay times out again. Kind is "signal" or "event".
type WaitTimeout struct {
	Kind    string
	Name    string
	Timeout time.Duration
}

func (e *WaitTimeout) Error() string {
	return fmt.Sprintf("no %s %q arrived within %s", e.Kind, e.Name, e.Timeout)
}
