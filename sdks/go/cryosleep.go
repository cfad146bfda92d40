// Package cryosleep writes durable workflows for cryopg in Go.
//
// Every function is a durable verb spoken over the agent socket. Inside a run a call
// either answers from the run's journal (a replay) or asks the agent, which records the
// answer before replying. Calls that wait (Sleep, the waits, ActivityCollect,
// ActivityWaitAll, Lock) may instead park the run: the agent stops the process and the
// program runs again from the top later, so such a call never returns on that pass.
//
// Errors come in three kinds, told apart with errors.As: *StepFailed (a command exited
// non-zero), *ScriptError (a refused request; deterministic), *AgentUnavailable (the
// agent went away; never retried). A bounded wait that runs out returns *WaitTimeout.
package cryosleep

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Option tunes a call; each verb reads the options that apply to it.
type Option func(*options)

type options struct {
	label       *string
	secrets     []string
	entity      *string
	tainted     bool
	public      bool
	as          *string
	by          *float64
	value       any
	hasValue    bool
	input       any
	interpreter *string
	source      *string
}

func collect(opts []Option) options {
	var o options
	for _, f := range opts {
		f(&o)
	}
	return o
}

// Label is shown in the run view beside a step's name.
func Label(label string) Option { return func(o *options) { o.label = &label } }

// Secrets names project secrets a command step needs; the run fails if one is missing.
func Secrets(names ...string) Option { return func(o *options) { o.secrets = names } }

// Entity puts a state cell in the project-wide entity scope instead of the run's own.
func Entity(name string) Option { return func(o *options) { o.entity = &name } }

// Tainted makes a trusted run's StateGet, StateCell, StateList or WaitEvent read what
// untrusted runs wrote or emitted (docs/security/trust.md).
func Tainted() Option { return func(o *options) { o.tainted = true } }

// Public makes a trusted run's StateSet of an entity cell, or its Emit, readable by
// untrusted runs (a later StateSet without it withdraws that).
func Public() Option { return func(o *options) { o.public = true } }

// flag adds a trust opt-in to a request only when it is set.
func flag(req request, name string, on bool) request {
	if on {
		req[name] = true
	}
	return req
}

// As names a cas/incr call (default: the key); a run may use a name once.
func As(name string) Option { return func(o *options) { o.as = &name } }

// By is the amount StateIncr adds (default 1).
func By(n float64) Option { return func(o *options) { o.by = &n } }

// Value is what StateAdd writes when it wins the cell (default true).
func Value(v any) Option { return func(o *options) { o.value, o.hasValue = v, true } }

// Input is a spawned child's input (any JSON).
func Input(v any) Option { return func(o *options) { o.input = v } }

// Interpreter runs a spawned child when its extension does not say how.
func Interpreter(argv string) Option { return func(o *options) { o.interpreter = &argv } }

// Source is a spawned child's source, instead of reading the file.
func Source(text string) Option { return func(o *options) { o.source = &text } }

func orNull[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

func jsonValue(what string, v any) (json.RawMessage, error) {
	b, err := encode(v)
	if err != nil {
		return nil, &ScriptError{"not_json", fmt.Sprintf("%s: the value does not round-trip through JSON: %v", what, err)}
	}
	return b, nil
}

// StepFn runs fn once and records its result; on every replay it returns the recorded
// result without calling fn. Only a success is recorded: an error from fn records
// nothing and is returned unchanged, so the step runs again on the next attempt. The
// result must round-trip through JSON; what is returned is the decoded JSON, on the
// first pass as on replays.
func StepFn[T any](name string, fn func() (T, error), opts ...Option) (T, error) {
	var zero T
	o := collect(opts)
	begin, err := call(request{"op": "step.begin", "name": name, "label": orNull(o.label)})
	if err != nil {
		return zero, err
	}
	if begin.bool("hit") {
		if code := begin.int("exit_code"); code != 0 {
			return zero, &StepFailed{name, code, begin.str("stdout")}
		}
		var out T
		if err := json.Unmarshal([]byte(begin.str("stdout")), &out); err != nil {
			return zero, &ScriptError{"not_json", fmt.Sprintf(
				"StepFn %q: the recorded result does not decode into %T: %v", name, zero, err)}
		}
		return out, nil
	}
	value, err := fn()
	if err != nil {
		return zero, err
	}
	text, out, err := roundTrip(value)
	if err != nil {
		return zero, &ScriptError{"not_json", fmt.Sprintf("StepFn %q: the result does not round-trip through JSON: %v", name, err)}
	}
	if _, err := call(request{"op": "step.finish", "call_id": begin.str("call_id"), "stdout": string(text), "exit_code": 0}); err != nil {
		return zero, err
	}
	return out, nil
}

func roundTrip[T any](value T) ([]byte, T, error) {
	var out T
	text, err := encode(value)
	if err != nil {
		return nil, out, err
	}
	if err := json.Unmarshal(text, &out); err != nil {
		return nil, out, err
	}
	again, err := encode(out)
	if err != nil {
		return nil, out, err
	}
	if !bytes.Equal(text, again) {
		return nil, out, fmt.Errorf("it encodes as %s but decodes back to %s", text, again)
	}
	return text, out, nil
}

// StepResult is what a command step recorded.
type StepResult struct {
	Stdout   string
	ExitCode int
}

// Step runs argv as a durable step and returns its stdout. A non-zero exit is recorded
// too and returns *StepFailed, on this pass and on every replay.
func Step(name string, argv []string, opts ...Option) (string, error) {
	r, err := StepUnchecked(name, argv, opts...)
	if err != nil {
		return "", err
	}
	if r.ExitCode != 0 {
		return r.Stdout, &StepFailed{name, r.ExitCode, r.Stdout}
	}
	return r.Stdout, nil
}

// StepUnchecked is Step that returns the exit code instead of *StepFailed.
func StepUnchecked(name string, argv []string, opts ...Option) (StepResult, error) {
	if len(argv) == 0 {
		return StepResult{}, &ScriptError{"bad_request", fmt.Sprintf("step %q needs a command", name)}
	}
	o := collect(opts)
	req := request{"op": "step.begin", "name": name, "label": orNull(o.label)}
	if len(o.secrets) > 0 {
		req["secrets"] = o.secrets
	}
	begin, err := call(req)
	if err != nil {
		return StepResult{}, err
	}
	if begin.bool("hit") {
		return StepResult{begin.str("stdout"), begin.int("exit_code")}, nil
	}
	ran := runCommand(argv, begin.str("idempotency_key"))
	if _, err := call(request{"op": "step.finish", "call_id": begin.str("call_id"), "stdout": ran.Stdout, "exit_code": ran.ExitCode}); err != nil {
		return StepResult{}, err
	}
	return ran, nil
}

func runCommand(argv []string, key string) StepResult {
	// The command gets no agent handles (a nested verb must fail loudly), only its key.
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CRYO_") {
			env = append(env, kv)
		}
	}
	env = append(env, "CRYO_IDEMPOTENCY_KEY="+key)
	var out bytes.Buffer
	run := func(argv []string) error {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = env
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, &out, os.Stderr
		return cmd.Run()
	}
	err := run(argv)
	if errors.Is(err, syscall.ENOEXEC) {
		// A script without a `#!` line: /bin/sh reads it, as a shell (or execvp) would.
		if script := shellScript(argv); script != nil {
			err = run(script)
		}
	}
	code := 0
	var exitErr *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exitErr):
		code = exitErr.ExitCode()
		if ws, ok := exitErr.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int(ws.Signal())
		}
	case errors.Is(err, fs.ErrPermission):
		fmt.Fprintf(os.Stderr, "cryosleep step: cannot run %s: %v\n", argv[0], err)
		code = 126
	default:
		fmt.Fprintf(os.Stderr, "cryosleep step: cannot run %s: %v\n", argv[0], err)
		code = 127
	}
	return StepResult{out.String(), code}
}

// shellScript is ["/bin/sh", path, args...] for a text file (no NUL in its first line,
// bash's test) that exec refused as no program; nil for anything else, which stays an
// exec format error (127).
func shellScript(argv []string) []string {
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	head := make([]byte, 256)
	n, _ := f.Read(head)
	line, _, _ := bytes.Cut(head[:n], []byte("\n"))
	if bytes.IndexByte(line, 0) >= 0 {
		return nil
	}
	return append([]string{"/bin/sh", path}, argv[1:]...)
}

// Sleep parks the run for d; the agent is freed meanwhile.
func Sleep(d time.Duration) error {
	_, err := call(request{"op": "sleep", "seconds": d.Seconds()})
	return err
}

func wait(kind, name string, timeout *time.Duration, opts []Option) (json.RawMessage, error) {
	op := "wait." + kind
	req := flag(request{"op": op, "name": name, "timeout": nil}, "tainted", collect(opts).tainted)
	if timeout != nil {
		what := "WaitSignalTimeout"
		if kind == "event" {
			what = "WaitEventTimeout"
		}
		if err := requireVerb(op, what); err != nil {
			return nil, err
		}
		req["timeout"] = timeout.Seconds()
	}
	r, err := call(req)
	if err != nil {
		return nil, err
	}
	if r.bool("timed_out") {
		return nil, &WaitTimeout{kind, name, *timeout}
	}
	return r.value("payload"), nil
}

// WaitSignal parks until the named signal arrives and returns its payload (raw JSON).
func WaitSignal(name string) (json.RawMessage, error) { return wait("signal", name, nil, nil) }

// WaitSignalTimeout is WaitSignal bounded by timeout; running out returns *WaitTimeout.
func WaitSignalTimeout(name string, timeout time.Duration) (json.RawMessage, error) {
	return wait("signal", name, &timeout, nil)
}

// WaitEvent parks until a project bus event of this name is published after the wait
// began and returns its payload (raw JSON). A trusted run hears untrusted runs' events
// only with Tainted(); an untrusted run hears those and published ones.
func WaitEvent(name string, opts ...Option) (json.RawMessage, error) {
	return wait("event", name, nil, opts)
}

// WaitEventTimeout is WaitEvent bounded by timeout; running out returns *WaitTimeout.
func WaitEventTimeout(name string, timeout time.Duration, opts ...Option) (json.RawMessage, error) {
	return wait("event", name, &timeout, opts)
}

// Emit publishes an event on the project bus (recorded: a replay does not publish again).
// With Public() a trusted run's event reaches untrusted runs waiting on it too.
func Emit(name string, payload any, opts ...Option) error {
	p, err := jsonValue(fmt.Sprintf("Emit %q payload", name), payload)
	if err != nil {
		return err
	}
	_, err = call(flag(request{"op": "emit", "name": name, "payload": p}, "public",
		collect(opts).public))
	return err
}

// Spawn starts the workflow in file as a child run and returns its run id (recorded by
// call order). Options: Input, Interpreter, Source.
func Spawn(file string, opts ...Option) (string, error) {
	o := collect(opts)
	var source string
	if o.source != nil {
		source = *o.source
	} else {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", &ScriptError{"bad_request", fmt.Sprintf("Spawn: cannot read %s: %v", file, err)}
		}
		source = string(b)
	}
	input, err := jsonValue(fmt.Sprintf("Spawn %q input", file), o.input)
	if err != nil {
		return "", err
	}
	r, err := call(request{"op": "spawn", "filename": filepath.Base(file), "source": source,
		"input": input, "interpreter": orNull(o.interpreter)})
	if err != nil {
		return "", err
	}
	return r.str("run_id"), nil
}

// ActivityOptions is the retry policy of an activity; zero values are not sent.
type ActivityOptions struct {
	Retries      int           // further attempts after a failed one
	RetryBackoff time.Duration // wait between attempts
	RetryOnExit  []int         // only these exit codes earn a retry
}

// ActivitySubmit starts argv as an activity under a name unique in this run and returns
// the child's run id.
func ActivitySubmit(name string, argv ...string) (string, error) {
	return ActivitySubmitWith(name, argv, ActivityOptions{})
}

// ActivitySubmitWith is ActivitySubmit with a retry policy.
func ActivitySubmitWith(name string, argv []string, o ActivityOptions) (string, error) {
	req := request{"op": "activity.submit", "name": name, "argv": argv}
	if o.Retries != 0 {
		req["retries"] = o.Retries
	}
	if o.RetryBackoff != 0 {
		req["retry_backoff"] = o.RetryBackoff.Seconds()
	}
	if o.RetryOnExit != nil {
		req["retry_on"] = o.RetryOnExit
	}
	r, err := call(req)
	if err != nil {
		return "", err
	}
	return r.str("run_id"), nil
}

// ActivityCollect waits for a submitted activity and returns its stdout; a non-zero
// exit (after its retries; 130 when cancelled) returns *StepFailed.
func ActivityCollect(name string) (string, error) {
	r, err := call(request{"op": "activity.collect", "name": name})
	if err != nil {
		return "", err
	}
	if code := r.int("exit_code"); code != 0 {
		return r.str("stdout"), &StepFailed{name, code, r.str("stdout")}
	}
	return r.str("stdout"), nil
}

// CallGraph runs the stored graph name (a cryosleep-graph/v1 workflow) with input as a
// child graph run, waits for it and returns its output as JSON. The first pass parks
// until the child ends; replays return the recorded output and start nothing. A child
// that failed is a *ScriptError with Code "graph_failed", carrying the child's error.
func CallGraph(name string, input any) (json.RawMessage, error) {
	in, err := jsonValue(fmt.Sprintf("CallGraph %q input", name), input)
	if err != nil {
		return nil, err
	}
	r, err := call(request{"op": "graph.call", "name": name, "input": in})
	if err != nil {
		return nil, err
	}
	return r.value("output"), nil
}

// CallNode runs one node (a cryosleep-node/v1 document: nodeType and its config) as a
// child graph run, waits for it and returns the node's output as JSON; as CallGraph
// otherwise. input may be nil.
func CallNode(nodeType string, config map[string]any, input any) (json.RawMessage, error) {
	cfg, err := jsonValue(fmt.Sprintf("CallNode %q config", nodeType), config)
	if err != nil {
		return nil, err
	}
	in, err := jsonValue(fmt.Sprintf("CallNode %q input", nodeType), input)
	if err != nil {
		return nil, err
	}
	r, err := call(request{"op": "node.call", "type": nodeType, "config": cfg, "input": in})
	if err != nil {
		return nil, err
	}
	return r.value("output"), nil
}

// ActivityWaitAll waits for every submitted, uncollected activity and returns how many
// failed.
func ActivityWaitAll() (int, error) {
	if err := requireVerb("activity.wait-all", "ActivityWaitAll"); err != nil {
		return 0, err
	}
	r, err := call(request{"op": "activity.wait-all"})
	if err != nil {
		return 0, err
	}
	return r.int("failed"), nil
}

// Activity submits, waits and collects in one call.
func Activity(name string, argv []string, o ActivityOptions) (string, error) {
	if _, err := ActivitySubmitWith(name, argv, o); err != nil {
		return "", err
	}
	return ActivityCollect(name)
}

// Annotate attaches a markdown note to the run page (every pass adds it again).
func Annotate(text string) error {
	_, err := call(request{"op": "annotate", "text": text})
	return err
}

// SetOutput sets one of the run's outputs (every pass sets it again).
func SetOutput(key string, value any) error {
	v, err := jsonValue(fmt.Sprintf("SetOutput %q value", key), value)
	if err != nil {
		return err
	}
	_, err = call(request{"op": "output.set", "key": key, "value": v})
	return err
}

// ReadInput decodes the run's input (null when it was submitted without one) into v.
func ReadInput(v any) error {
	path := os.Getenv("CRYO_INPUT_FILE")
	if path == "" {
		return &ScriptError{"outside_run", "ReadInput: not inside a cryopg run (CRYO_INPUT_FILE is not set)"}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return &ScriptError{"outside_run", fmt.Sprintf("ReadInput: %v", err)}
	}
	return json.Unmarshal(b, v)
}

// Cell is a state cell's value and version.
type Cell struct {
	Key     string          `json:"key,omitempty"`
	Value   json.RawMessage `json:"value"`
	Version int             `json:"version"`
}

// StateGet returns a cell's value (raw JSON), or nil when it is unset.
func StateGet(key string, opts ...Option) (json.RawMessage, error) {
	c, err := StateCell(key, opts...)
	if err != nil || c == nil {
		return nil, err
	}
	return c.Value, nil
}

// StateCell returns a cell's value and version (for StateCas), or nil when it is unset.
func StateCell(key string, opts ...Option) (*Cell, error) {
	o := collect(opts)
	r, err := call(flag(request{"op": "state.get", "key": key, "entity": orNull(o.entity)},
		"tainted", o.tainted))
	if err != nil || !r.bool("found") {
		return nil, err
	}
	return &Cell{Value: r.value("value"), Version: r.int("version")}, nil
}

// StateSet writes a cell and returns its new version.
func StateSet(key string, value any, opts ...Option) (int, error) {
	o := collect(opts)
	v, err := jsonValue(fmt.Sprintf("StateSet %q value", key), value)
	if err != nil {
		return 0, err
	}
	r, err := call(flag(request{"op": "state.set", "key": key, "entity": orNull(o.entity),
		"value": v}, "public", o.public))
	if err != nil {
		return 0, err
	}
	return r.int("version"), nil
}

// StateDelete deletes a cell; true when there was one.
func StateDelete(key string, opts ...Option) (bool, error) {
	o := collect(opts)
	r, err := call(request{"op": "state.delete", "key": key, "entity": orNull(o.entity)})
	if err != nil {
		return false, err
	}
	return r.bool("deleted"), nil
}

// StateList returns every cell of the scope, in key order.
func StateList(opts ...Option) ([]Cell, error) {
	o := collect(opts)
	r, err := call(flag(request{"op": "state.list", "entity": orNull(o.entity)}, "tainted",
		o.tainted))
	if err != nil {
		return nil, err
	}
	cells := []Cell{}
	_ = json.Unmarshal(r["cells"], &cells)
	return cells, nil
}

// StateAdd claims a cell if nobody has (recorded: a replay gives the same answer); true
// when this run won it. It writes Value (default true).
func StateAdd(key string, opts ...Option) (bool, error) {
	o := collect(opts)
	var value any = true
	if o.hasValue {
		value = o.value
	}
	v, err := jsonValue(fmt.Sprintf("StateAdd %q value", key), value)
	if err != nil {
		return false, err
	}
	if err := requireVerb("state.add", "StateAdd"); err != nil {
		return false, err
	}
	r, err := call(request{"op": "state.add", "key": key, "entity": orNull(o.entity), "value": v})
	if err != nil {
		return false, err
	}
	return r.bool("claimed"), nil
}

// StateCas writes value only if the cell is still at version expect (recorded under As,
// default the key); true when it swapped.
func StateCas(key string, value any, expect int, opts ...Option) (bool, error) {
	o := collect(opts)
	v, err := jsonValue(fmt.Sprintf("StateCas %q value", key), value)
	if err != nil {
		return false, err
	}
	req := request{"op": "state.cas", "key": key, "entity": orNull(o.entity), "value": v, "expect": expect}
	if o.as != nil {
		req["as"] = *o.as
	}
	r, err := call(req)
	if err != nil {
		return false, err
	}
	return r.bool("swapped"), nil
}

// StateIncr adds By (default 1) to a numeric cell and returns the total (recorded
// under As, default the key).
func StateIncr(key string, opts ...Option) (float64, error) {
	o := collect(opts)
	by := 1.0
	if o.by != nil {
		by = *o.by
	}
	req := request{"op": "state.incr", "key": key, "entity": orNull(o.entity), "by": by}
	if o.as != nil {
		req["as"] = *o.as
	}
	r, err := call(req)
	if err != nil {
		return 0, err
	}
	var total float64
	_ = json.Unmarshal(r["value"], &total)
	return total, nil
}

// Lock holds the project-wide lease group while body runs and releases it when body
// returns (with or without an error). On a held group the run parks until granted.
// body's error is returned unchanged.
func Lock(group string, body func() error) (err error) {
	if _, err := call(request{"op": "lock.acquire", "group": group, "scoped": true}); err != nil {
		return err
	}
	released := false
	defer func() {
		if !released { // body panicked: release, then let the panic go on
			_, _ = call(request{"op": "lock.release", "group": group})
		}
	}()
	bodyErr := body()
	released = true
	_, relErr := call(request{"op": "lock.release", "group": group})
	if bodyErr != nil {
		return bodyErr
	}
	return relErr
}

// ParseDuration reads a duration as the CLI takes it: a number of seconds ("10", "0.5")
// or a number with a unit ms, s, m, h or d ("30s", "5m", "1.5h", "500ms", "1d"), for
// Sleep and the timeouts, which take a time.Duration: Sleep(MustDuration("5m")).
func ParseDuration(text string) (time.Duration, error) {
	raw := strings.ToLower(strings.TrimSpace(text))
	unit := ""
	for _, u := range []string{"ms", "s", "m", "h", "d"} {
		if strings.HasSuffix(raw, u) {
			unit = u
			break
		}
	}
	number := strings.TrimSpace(strings.TrimSuffix(raw, unit))
	scale := map[string]float64{"ms": 1e-3, "s": 1, "": 1, "m": 60, "h": 3600, "d": 86400}[unit]
	value, err := strconv.ParseFloat(number, 64)
	if err != nil || strings.Trim(number, "0123456789.") != "" {
		return 0, &ScriptError{Code: "bad_request", Message: fmt.Sprintf(
			"invalid duration %q: expected a non-negative number with an optional unit ms, s, m, h or d", text)}
	}
	return time.Duration(value * scale * float64(time.Second)), nil
}

// MustDuration is ParseDuration for a literal in the program; it panics on a bad one.
func MustDuration(text string) time.Duration {
	d, err := ParseDuration(text)
	if err != nil {
		panic(err)
	}
	return d
}
