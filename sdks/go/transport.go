package cryosleep

// One request per connection to the agent socket ($CRYO_SOCKET): connect, write one JSON
// line, read one JSON line. Only connecting is retried; a request that reached the wire
// is never sent again, because replay is what re-runs a step.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

type request map[string]any
type reply map[string]json.RawMessage

// Ops after which the agent may park the run: it stops the script and never answers.
var parking = map[string]bool{
	"sleep": true, "wait.signal": true, "wait.event": true,
	"activity.collect": true, "activity.wait-all": true, "lock.acquire": true,
	"graph.call": true, "node.call": true,
}

func intEnv(name string, fallback int) int {
	n, err := strconv.Atoi(strings.TrimSpace(os.Getenv(name)))
	if err != nil || n < 0 {
		return fallback
	}
	return n
}

func connect(path string) (net.Conn, error) {
	attempts := intEnv("CRYO_CONNECT_ATTEMPTS", 3)
	if attempts < 1 {
		attempts = 1
	}
	backoff := time.Duration(intEnv("CRYO_CONNECT_BACKOFF_MS", 50)) * time.Millisecond
	for attempt := 0; ; attempt++ {
		conn, err := net.Dial("unix", path)
		if err == nil {
			return conn, nil
		}
		transient := errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EAGAIN)
		if !transient || attempt+1 >= attempts {
			return nil, &AgentUnavailable{fmt.Sprintf("cannot reach the agent at %s (%v)", path, err)}
		}
		time.Sleep(backoff << attempt)
	}
}

func encode(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// call sends one request and returns its reply, or the matching error kind.
func call(req request) (reply, error) {
	op, _ := req["op"].(string)
	path := os.Getenv("CRYO_SOCKET")
	if path == "" {
		return nil, &ScriptError{"outside_run", fmt.Sprintf(
			"%s: not inside a cryopg run (CRYO_SOCKET is not set); submit the program with "+
				"`cryopg submit` or run it under `cryopg dev`", op)}
	}
	line, err := encode(req)
	if err != nil {
		return nil, &ScriptError{"not_json", fmt.Sprintf("%s: the request does not encode as JSON: %v", op, err)}
	}
	if parking[op] {
		os.Stdout.Sync() // what this pass printed belongs in the log before a park
	}
	conn, err := connect(path)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if _, err := conn.Write(append(line, '\n')); err != nil {
		return nil, &AgentUnavailable{fmt.Sprintf("%s: lost the agent connection (%v)", op, err)}
	}
	raw, err := bufio.NewReader(conn).ReadBytes('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, &AgentUnavailable{fmt.Sprintf("%s: lost the agent connection (%v)", op, err)}
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		if parking[op] {
			// The agent parked the run and is stopping this process: never return. Still
			// alive after the grace period means the agent went away instead.
			time.Sleep(time.Duration(intEnv("CRYO_SUSPEND_GRACE_MS", 5000)) * time.Millisecond)
			return nil, &AgentUnavailable{op + ": the agent closed the connection without a reply and did not stop the program"}
		}
		return nil, &AgentUnavailable{op + ": the agent closed the connection without a reply"}
	}
	return decodeReply(op, raw)
}

// decodeReply turns a reply line into the reply, or the matching error kind.
func decodeReply(op string, raw []byte) (reply, error) {
	var r reply
	if err := json.Unmarshal(raw, &r); err != nil || r == nil {
		return nil, &AgentUnavailable{op + ": the agent sent a malformed reply"}
	}
	var ok bool
	if json.Unmarshal(r["ok"], &ok) != nil || !ok {
		var e struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		}
		_ = json.Unmarshal(r["error"], &e)
		if e.Code == "" {
			e.Code = "bad_request"
		}
		if e.Message == "" {
			e.Message = "the agent refused the request"
		}
		if e.Code == "engine" { // the server behind the agent, or this pass is ending
			return nil, &AgentUnavailable{op + ": " + e.Message}
		}
		return nil, &ScriptError{e.Code, op + ": " + e.Message}
	}
	return r, nil
}

func (r reply) str(key string) string {
	var s string
	_ = json.Unmarshal(r[key], &s)
	return s
}

func (r reply) int(key string) int {
	var n float64
	_ = json.Unmarshal(r[key], &n)
	return int(n)
}

func (r reply) bool(key string) bool {
	var b bool
	_ = json.Unmarshal(r[key], &b)
	return b
}

// value is the raw JSON of key, "null" when absent.
func (r reply) value(key string) json.RawMessage {
	if v, ok := r[key]; ok && len(v) > 0 {
		return v
	}
	return json.RawMessage("null")
}

var (
	helloMu  sync.Mutex
	advertis map[string]bool
)

// agentVerbs asks the agent what it offers, once per process.
func agentVerbs() (map[string]bool, error) {
	helloMu.Lock()
	defer helloMu.Unlock()
	if advertis != nil {
		return advertis, nil
	}
	r, err := call(request{"op": "hello"})
	if err != nil {
		return nil, err
	}
	var verbs []string
	_ = json.Unmarshal(r["verbs"], &verbs)
	advertis = map[string]bool{}
	for _, v := range verbs {
		advertis[v] = true
	}
	return advertis, nil
}

func resetAgentCache() {
	helloMu.Lock()
	advertis = nil
	helloMu.Unlock()
}

// requireVerb fails at the call site when the agent does not list verb.
func requireVerb(verb, what string) error {
	verbs, err := agentVerbs()
	if err != nil {
		return err
	}
	if !verbs[verb] {
		return &ScriptError{"unsupported_verb", fmt.Sprintf(
			"%s needs an agent that offers %s, and this agent does not list it: upgrade the agent", what, verb)}
	}
	return nil
}
