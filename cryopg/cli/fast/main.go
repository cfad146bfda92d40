// cryopg, compiled, for the hottest in-script verb: `cryopg step` inside a run is
// answered here without starting Python (some 20 ms a call); every other command, and
// any step whose arguments are not plainly valid, is handed to the Python `cryopg`
// (execve, same argv), which says and exits exactly as it always has.
//
// scripts/setup builds it into .venv/libexec/cryopg-fast/cryopg with the Python
// launcher's path baked in (-X main.fallback=...), and the agent puts that directory
// first on a job's PATH. Behaviour follows cryopg/cli/inscript.py and
// inscript_client.py (run_step, call): the same socket requests, stdout, exit codes
// and error lines.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"
)

// The Python launcher every other command goes to (set at build time).
var fallback = ""

func main() {
	args := os.Args[1:]
	if len(args) > 0 && args[0] == "step" && os.Getenv("CRYO_SOCKET") != "" {
		if name, label, needs, command, ok := parseStep(args[1:]); ok {
			os.Exit(step(os.Getenv("CRYO_SOCKET"), name, label, needs, command))
		}
	}
	python()
}

// python replaces this process with the Python cryopg.
func python() {
	argv := append([]string{fallback}, os.Args[1:]...)
	err := syscall.Exec(fallback, argv, os.Environ())
	fmt.Fprintf(os.Stderr, "cryopg: cannot start %s: %v\n", fallback, err)
	os.Exit(1)
}

// parseStep mirrors _parse_step; ok is false for anything it would refuse (or a help
// request), which Python then refuses with its own words.
func parseStep(args []string) (name string, label *string, needs []string, command []string, ok bool) {
	cut := -1
	for i, a := range args {
		if a == "--" {
			cut = i
			break
		}
		if a == "-h" || a == "--help" {
			return
		}
	}
	if cut < 0 {
		return
	}
	head, command := args[:cut], args[cut+1:]
	for i := 0; i < len(head); i++ {
		a := head[i]
		switch {
		case a == "--label" || a == "--secret":
			if i+1 >= len(head) {
				return
			}
			if a == "--label" {
				v := head[i+1]
				label = &v
			} else {
				needs = append(needs, head[i+1])
			}
			i++
		case strings.HasPrefix(a, "--label="):
			v := a[len("--label="):]
			label = &v
		case strings.HasPrefix(a, "--secret="):
			needs = append(needs, a[len("--secret="):])
		case strings.HasPrefix(a, "-") && a != "-":
			return
		case name == "":
			name = a
		default:
			return
		}
	}
	if name == "" || len(command) == 0 {
		// No command: Python decides what that means (it fails to start nothing).
		return
	}
	return name, label, needs, command, true
}

type agentError struct {
	message string
	code    string
}

func (e *agentError) exitCode() int {
	switch e.code {
	case "reserved_key", "invalid_argument", "bad_request":
		return 2
	}
	return 1
}

func step(socket, name string, label *string, needs []string, command []string) int {
	req := map[string]any{"op": "step.begin", "name": name, "label": label}
	if len(needs) > 0 {
		req["secrets"] = needs
	}
	conn, err := connect(socket)
	if err != nil {
		python() // nothing sent yet: Python retries and words the failure itself
	}
	reply, aerr := call(conn, req)
	if aerr != nil {
		return fail(aerr)
	}
	if hit, _ := reply["hit"].(bool); hit {
		text, _ := reply["stdout"].(string)
		writeStdout(text)
		return intOf(reply["exit_code"])
	}
	env := make([]string, 0, 64)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CRYO_") {
			env = append(env, kv)
		}
	}
	env = append(env, "CRYO_IDEMPOTENCY_KEY="+stringOf(reply["idempotency_key"]))
	raw, code := run(command, env)
	stdout := decodeReplacing(raw)
	conn, err = connect(socket)
	if err != nil {
		return fail(&agentError{message: fmt.Sprintf("cannot reach the agent at %s (%s)", socket, strerror(err))})
	}
	if _, aerr := call(conn, map[string]any{"op": "step.finish", "call_id": reply["call_id"],
		"stdout": stdout, "exit_code": code}); aerr != nil {
		return fail(aerr)
	}
	return code
}

// run is lean.run_captured with echo_fd 1: stdout captured and echoed as it comes (a
// long step's output reaches the log while it runs), stdin and stderr inherited.
func run(command []string, env []string) ([]byte, int) {
	cmd := exec.Command(command[0], command[1:]...)
	if !strings.Contains(command[0], "/") {
		// Looked up on the body's PATH, as posix_spawnp does with the given environment.
		cmd.Path = command[0]
		if p, err := lookPath(command[0], env); err == nil {
			cmd.Path = p
		} else {
			return nil, startFailure(command[0], err)
		}
	}
	cmd.Env = env
	cmd.Stdin = os.Stdin
	cmd.Stderr = os.Stderr
	var out bytes.Buffer
	cmd.Stdout = io.MultiWriter(&out, os.Stdout)
	err := cmd.Run()
	if errors.Is(err, syscall.ENOEXEC) && isText(cmd.Path) {
		// A script without a `#!` line: /bin/sh reads it, as a shell (or execvp) would.
		sh := exec.Command("/bin/sh", append([]string{cmd.Path}, command[1:]...)...)
		sh.Env, sh.Stdin, sh.Stderr, sh.Stdout = env, os.Stdin, os.Stderr, cmd.Stdout
		err = sh.Run()
	}
	if err == nil {
		return out.Bytes(), 0
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return out.Bytes(), 128 + int(ws.Signal())
		}
		return out.Bytes(), exit.ExitCode()
	}
	return nil, startFailure(command[0], err)
}

// isText is lean.shell_script's test: no NUL in the file's first line (of 256 bytes),
// as bash checks before handing a file without `#!` to the shell.
func isText(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	head := make([]byte, 256)
	n, _ := io.ReadFull(f, head)
	head = head[:n]
	if i := bytes.IndexByte(head, '\n'); i >= 0 {
		head = head[:i]
	}
	return bytes.IndexByte(head, 0) < 0
}

func startFailure(name string, err error) int {
	if errors.Is(err, os.ErrPermission) || errors.Is(err, syscall.EACCES) {
		fmt.Fprintf(os.Stderr, "cryopg step: permission denied: %s\n", name)
		return 126
	}
	var errno syscall.Errno
	if errors.As(err, &errno) && errno != syscall.ENOENT {
		// exec format error and the like, worded as Python's strerror
		fmt.Fprintf(os.Stderr, "cryopg step: cannot run %s: %s\n", name, strings.ToLower(errno.Error()))
		return 127
	}
	fmt.Fprintf(os.Stderr, "cryopg step: command not found: %s\n", name)
	return 127
}

// lookPath searches PATH from env for an executable file named name.
func lookPath(name string, env []string) (string, error) {
	path := ""
	for _, kv := range env {
		if strings.HasPrefix(kv, "PATH=") {
			path = kv[5:]
		}
	}
	denied := false
	for _, dir := range strings.Split(path, ":") {
		if dir == "" {
			dir = "."
		}
		p := dir + "/" + name
		st, err := os.Stat(p)
		if err != nil || st.IsDir() {
			continue
		}
		if syscall.Access(p, 1) == nil { // X_OK
			return p, nil
		}
		denied = true
	}
	if denied {
		return "", os.ErrPermission
	}
	return "", os.ErrNotExist
}

func connect(socket string) (net.Conn, error) {
	attempts := envInt("CRYO_CONNECT_ATTEMPTS", 3)
	if attempts < 1 {
		attempts = 1
	}
	backoff := time.Duration(envInt("CRYO_CONNECT_BACKOFF_MS", 50)) * time.Millisecond
	var err error
	for i := 0; i < attempts; i++ {
		var c net.Conn
		c, err = net.Dial("unix", socket)
		if err == nil {
			return c, nil
		}
		if !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, syscall.EAGAIN) {
			return nil, err
		}
		if i+1 < attempts {
			time.Sleep(backoff << i)
		}
	}
	return nil, err
}

// call sends one request line and reads one reply line, as inscript_client.call does.
func call(conn net.Conn, req map[string]any) (map[string]any, *agentError) {
	defer conn.Close()
	line, _ := json.Marshal(req)
	var data []byte
	if _, err := conn.Write(append(line, '\n')); err != nil {
		return nil, &agentError{message: "lost the agent connection (" + strerror(err) + ")"}
	}
	buf := make([]byte, 65536)
	for {
		n, err := conn.Read(buf)
		data = append(data, buf[:n]...)
		if n > 0 && buf[n-1] == '\n' {
			break
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				return nil, &agentError{message: "lost the agent connection (" + strerror(err) + ")"}
			}
			break
		}
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, &agentError{message: "the agent closed the connection without a reply"}
	}
	var reply map[string]any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&reply); err != nil || reply == nil {
		return nil, &agentError{message: "the agent sent a malformed reply"}
	}
	if ok, _ := reply["ok"].(bool); !ok {
		message, code := "", ""
		if e, isMap := reply["error"].(map[string]any); isMap {
			message, _ = e["message"].(string)
			code, _ = e["code"].(string)
		}
		if message == "" {
			message = "the agent refused the request"
		}
		return nil, &agentError{message: message, code: code}
	}
	return reply, nil
}

func fail(e *agentError) int {
	fmt.Fprintf(os.Stderr, "cryopg step: %s\n", e.message)
	return e.exitCode()
}

func writeStdout(text string) {
	os.Stdout.WriteString(text)
}

// decodeReplacing is bytes.decode("utf-8", errors="replace"): each invalid byte
// becomes U+FFFD.
func decodeReplacing(raw []byte) string {
	if utf8.Valid(raw) {
		return string(raw)
	}
	var b strings.Builder
	for len(raw) > 0 {
		r, size := utf8.DecodeRune(raw)
		if r == utf8.RuneError && size == 1 {
			b.WriteRune(utf8.RuneError)
		} else {
			b.Write(raw[:size])
		}
		raw = raw[size:]
	}
	return b.String()
}

func intOf(v any) int {
	switch n := v.(type) {
	case json.Number:
		i, err := n.Int64()
		if err == nil {
			return int(i)
		}
	case nil:
		return 0
	}
	return 0
}

func stringOf(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	return ""
}

func envInt(name string, def int) int {
	v, err := strconv.Atoi(os.Getenv(name))
	if err != nil {
		return def
	}
	return v
}

// strerror words an error as Python's OSError.strerror does ("No such file or directory").
func strerror(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		s := errno.Error()
		return strings.ToUpper(s[:1]) + s[1:]
	}
	return err.Error()
}
