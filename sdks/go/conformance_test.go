package cryosleep

// Replays sdks/conformance/vectors/*.json against a fake agent socket (see the README
// there): each case makes one SDK call and checks the exact requests and the outcome.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"
)

type exchange struct {
	Request    map[string]any  `json:"request"`
	Reply      json.RawMessage `json:"reply"`
	ReplyRaw   *string         `json:"reply_raw"`
	JSONFields []string        `json:"json_fields"`
}

type vectorCase struct {
	ID        string             `json:"id"`
	Env       map[string]*string `json:"env"`
	Server    string             `json:"server"`
	Call      map[string]any     `json:"call"`
	Exchanges []exchange         `json:"exchanges"`
	Result    map[string]any     `json:"result"`
	FnCalls   *int               `json:"fn_calls"`
}

type userError struct{ msg string }

func (e *userError) Error() string { return e.msg }

func vectorsDir() string {
	if d := os.Getenv("CRYO_CONFORMANCE_VECTORS"); d != "" {
		return d
	}
	return filepath.Join("..", "conformance", "vectors")
}

func normalise(m map[string]any, fields []string) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		out[k] = v
	}
	for _, f := range fields {
		if s, ok := out[f].(string); ok {
			var v any
			if json.Unmarshal([]byte(s), &v) == nil {
				out[f] = v
			}
		}
	}
	return out
}

type fakeAgent struct {
	ln       net.Listener
	count    int
	problems []string
	done     chan struct{}
}

func startAgent(path string, exchanges []exchange) (*fakeAgent, error) {
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	a := &fakeAgent{ln: ln, done: make(chan struct{})}
	go func() {
		defer close(a.done)
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			a.serve(conn, exchanges)
		}
	}()
	return a, nil
}

func (a *fakeAgent) serve(conn net.Conn, exchanges []exchange) {
	defer conn.Close()
	buf := make([]byte, 0, 4096)
	tmp := make([]byte, 4096)
	for !strings.Contains(string(buf), "\n") {
		n, err := conn.Read(tmp)
		buf = append(buf, tmp[:n]...)
		if err != nil {
			break
		}
	}
	line := strings.SplitN(string(buf), "\n", 2)[0]
	if strings.TrimSpace(line) == "" {
		return
	}
	var req map[string]any
	if err := json.Unmarshal([]byte(line), &req); err != nil {
		a.problems = append(a.problems, "request is not JSON: "+line)
		return
	}
	if a.count >= len(exchanges) {
		a.problems = append(a.problems, "unexpected request "+line)
		a.count++
		return
	}
	ex := exchanges[a.count]
	a.count++
	got, want := normalise(req, ex.JSONFields), normalise(ex.Request, ex.JSONFields)
	if !reflect.DeepEqual(got, want) {
		a.problems = append(a.problems, fmt.Sprintf("request #%d: got %v, want %v", a.count, got, want))
	}
	switch {
	case ex.ReplyRaw != nil:
		conn.Write([]byte(*ex.ReplyRaw))
	case string(ex.Reply) == "null" || len(ex.Reply) == 0:
	default:
		var compact bytes.Buffer
		_ = json.Compact(&compact, ex.Reply)
		conn.Write(append(compact.Bytes(), '\n'))
	}
}

func (a *fakeAgent) stop() {
	a.ln.Close()
	<-a.done
}

func str(c map[string]any, k string) string { s, _ := c[k].(string); return s }

func strs(c map[string]any, k string) []string {
	var out []string
	for _, v := range c[k].([]any) {
		out = append(out, v.(string))
	}
	return out
}

func common(c map[string]any) []Option {
	var opts []Option
	if v, ok := c["label"].(string); ok {
		opts = append(opts, Label(v))
	}
	if v, ok := c["entity"].(string); ok {
		opts = append(opts, Entity(v))
	}
	if v, ok := c["as"].(string); ok {
		opts = append(opts, As(v))
	}
	if v, ok := c["by"].(float64); ok {
		opts = append(opts, By(v))
	}
	if v, ok := c["value"]; ok && str(c, "verb") == "state_add" {
		opts = append(opts, Value(v))
	}
	if v, ok := c["input"]; ok {
		opts = append(opts, Input(v))
	}
	if v, ok := c["interpreter"].(string); ok {
		opts = append(opts, Interpreter(v))
	}
	return opts
}

func seconds(c map[string]any, k string) time.Duration {
	return time.Duration(c[k].(float64) * float64(time.Second))
}

func activityOptions(c map[string]any) ActivityOptions {
	var o ActivityOptions
	if v, ok := c["retries"].(float64); ok {
		o.Retries = int(v)
	}
	if _, ok := c["retry_backoff"]; ok {
		o.RetryBackoff = seconds(c, "retry_backoff")
	}
	if v, ok := c["retry_on_exit"].([]any); ok {
		o.RetryOnExit = []int{}
		for _, n := range v {
			o.RetryOnExit = append(o.RetryOnExit, int(n.(float64)))
		}
	}
	return o
}

// stepArgv is a step's argv; with "script", that file written (executable) and its path first.
func stepArgv(c map[string]any, dir string) []string {
	script, ok := c["script"].(map[string]any)
	if !ok {
		return strs(c, "argv")
	}
	path := filepath.Join(dir, str(script, "file"))
	if err := os.WriteFile(path, []byte(str(script, "source")), 0o755); err != nil {
		panic(err)
	}
	return append([]string{path}, strs(c, "argv")...)
}

func makeCall(c map[string]any, fnCalls *int, dir string) (any, error) {
	opts := common(c)
	name := str(c, "name")
	key := str(c, "key")
	switch str(c, "verb") {
	case "step_fn":
		return StepFn(name, func() (any, error) {
			*fnCalls++
			if msg, ok := c["raises"].(string); ok {
				return nil, &userError{msg}
			}
			if c["returns_unencodable"] == true {
				return make(chan int), nil
			}
			return c["returns"], nil
		}, opts...)
	case "step":
		return Step(name, stepArgv(c, dir), opts...)
	case "step_unchecked":
		r, err := StepUnchecked(name, stepArgv(c, dir), opts...)
		return map[string]any{"exit_code": r.ExitCode, "stdout": r.Stdout}, err
	case "sleep":
		return nil, Sleep(seconds(c, "seconds"))
	case "wait_signal", "wait_event":
		var raw json.RawMessage
		var err error
		signal := str(c, "verb") == "wait_signal"
		_, bounded := c["timeout"]
		switch {
		case signal && bounded:
			raw, err = WaitSignalTimeout(name, seconds(c, "timeout"))
		case signal:
			raw, err = WaitSignal(name)
		case bounded:
			raw, err = WaitEventTimeout(name, seconds(c, "timeout"))
		default:
			raw, err = WaitEvent(name)
		}
		return raw, err
	case "emit":
		if c["payload_unencodable"] == true {
			return nil, Emit(name, make(chan int))
		}
		return nil, Emit(name, c["payload"])
	case "call_graph":
		if c["input_unencodable"] == true {
			return CallGraph(name, make(chan int))
		}
		return CallGraph(name, c["input"])
	case "call_node":
		cfg, _ := c["config"].(map[string]any)
		return CallNode(str(c, "type"), cfg, c["input"])
	case "spawn":
		path := filepath.Join(dir, str(c, "file"))
		if err := os.WriteFile(path, []byte(str(c, "source")), 0o600); err != nil {
			return nil, err
		}
		return Spawn(path, opts...)
	case "annotate":
		return nil, Annotate(str(c, "text"))
	case "output_set":
		return nil, SetOutput(key, c["value"])
	case "state_get":
		return StateGet(key, opts...)
	case "state_cell":
		cell, err := StateCell(key, opts...)
		if cell == nil {
			return nil, err
		}
		return map[string]any{"value": cell.Value, "version": cell.Version}, err
	case "state_set":
		if c["value_unencodable"] == true {
			return StateSet(key, make(chan int), opts...)
		}
		return StateSet(key, c["value"], opts...)
	case "state_delete":
		return StateDelete(key, opts...)
	case "state_list":
		return StateList(opts...)
	case "state_add":
		return StateAdd(key, opts...)
	case "state_cas":
		return StateCas(key, c["value"], int(c["expect"].(float64)), opts...)
	case "state_incr":
		return StateIncr(key, opts...)
	case "activity_submit":
		return ActivitySubmitWith(name, strs(c, "argv"), activityOptions(c))
	case "activity":
		return Activity(name, strs(c, "argv"), activityOptions(c))
	case "activity_collect":
		return ActivityCollect(name)
	case "activity_wait_all":
		return ActivityWaitAll()
	case "lock":
		return nil, Lock(str(c, "group"), func() error {
			*fnCalls++
			for _, inner := range c["body"].([]any) {
				if _, err := makeCall(inner.(map[string]any), fnCalls, dir); err != nil {
					return err
				}
			}
			if c["body_raises"] == true {
				return &userError{"body failed"}
			}
			return nil
		})
	case "sequence":
		var results []any
		for _, inner := range c["calls"].([]any) {
			v, err := makeCall(inner.(map[string]any), fnCalls, dir)
			if err != nil {
				return nil, err
			}
			results = append(results, v)
		}
		return results, nil
	}
	return nil, fmt.Errorf("unknown verb %v", c["verb"])
}

func asJSON(t *testing.T, v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("result does not encode: %v", err)
	}
	var out any
	_ = json.Unmarshal(b, &out)
	return out
}

func checkOutcome(t *testing.T, want map[string]any, value any, err error) {
	t.Helper()
	if expected, ok := want["value"]; ok {
		if err != nil {
			t.Fatalf("expected a value, got error %T: %v", err, err)
		}
		if got := asJSON(t, value); !reflect.DeepEqual(got, asJSON(t, expected)) {
			t.Fatalf("value: got %#v, want %#v", got, expected)
		}
		return
	}
	kind := want["error"].(string)
	if err == nil {
		t.Fatalf("expected %s, got value %#v", kind, value)
	}
	var (
		sf *StepFailed
		se *ScriptError
		au *AgentUnavailable
		wt *WaitTimeout
		ue *userError
	)
	matched := map[string]bool{
		"StepFailed":       errors.As(err, &sf),
		"ScriptError":      errors.As(err, &se),
		"AgentUnavailable": errors.As(err, &au),
		"WaitTimeout":      errors.As(err, &wt),
		"FunctionError":    errors.As(err, &ue),
	}[kind]
	if !matched {
		t.Fatalf("expected %s, got %T: %v", kind, err, err)
	}
	if code, ok := want["code"].(string); ok && se.Code != code {
		t.Fatalf("code: got %q, want %q", se.Code, code)
	}
	if code, ok := want["exit_code"].(float64); ok && sf.ExitCode != int(code) {
		t.Fatalf("exit code: got %d, want %v", sf.ExitCode, code)
	}
	if subs, ok := want["message_contains"].([]any); ok {
		for _, s := range subs {
			if !strings.Contains(err.Error(), s.(string)) {
				t.Fatalf("%q not in %q", s, err.Error())
			}
		}
	}
}

func TestConformanceVectors(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(vectorsDir(), "*.json"))
	sort.Strings(files)
	if len(files) == 0 {
		t.Fatalf("no vectors under %s", vectorsDir())
	}
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Cases []vectorCase `json:"cases"`
		}
		if err := json.Unmarshal(raw, &doc); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		group := strings.TrimSuffix(filepath.Base(file), ".json")
		for _, vc := range doc.Cases {
			vc := vc
			t.Run(group+"/"+vc.ID, func(t *testing.T) { runCase(t, vc) })
		}
	}
}

func runCase(t *testing.T, vc vectorCase) {
	dir, err := os.MkdirTemp("", "cryo-go-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "agent.sock")
	resetAgentCache()
	sock := path
	if vc.Server == "absent" {
		sock = filepath.Join(dir, "nobody.sock")
	}
	t.Setenv("CRYO_SOCKET", sock)
	for k, v := range vc.Env {
		if v == nil {
			t.Setenv(k, "")
			os.Unsetenv(k)
		} else {
			t.Setenv(k, *v)
		}
	}
	var agent *fakeAgent
	if vc.Server != "absent" {
		if agent, err = startAgent(path, vc.Exchanges); err != nil {
			t.Fatal(err)
		}
	}
	fnCalls := 0
	value, callErr := makeCall(vc.Call, &fnCalls, dir)
	if agent != nil {
		agent.stop()
	}
	checkOutcome(t, vc.Result, value, callErr)
	if agent != nil {
		if len(agent.problems) > 0 {
			t.Fatalf("requests: %s", strings.Join(agent.problems, "; "))
		}
		if agent.count != len(vc.Exchanges) {
			t.Fatalf("requests: got %d, want %d", agent.count, len(vc.Exchanges))
		}
	}
	if vc.FnCalls != nil && fnCalls != *vc.FnCalls {
		t.Fatalf("function calls: got %d, want %d", fnCalls, *vc.FnCalls)
	}
}
