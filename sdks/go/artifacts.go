package cryosleep

// Artifacts: files kept with the run (or cached under a key), moved over the agent
// socket. Its one exception to one JSON line each way: a put's request line says "size"
// and the file's bytes follow it; a get's reply line says "size" and "sha256" and the
// bytes follow it. Files move a chunk at a time, and a download replaces its path only
// once the SHA-256 matched.

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Artifact is one artifact as the agent lists or stores it.
type Artifact struct {
	Name   string `json:"name"`
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
	Key    string `json:"key,omitempty"`
	RunID  string `json:"run_id,omitempty"`
}

type artifactOptions struct {
	key, run        *string
	cached          bool
	public, tainted bool
}

// ArtifactOption qualifies an artifact call.
type ArtifactOption func(*artifactOptions)

// ArtifactKey names the project's cached artifact under key instead of the run's own.
func ArtifactKey(key string) ArtifactOption { return func(o *artifactOptions) { o.key = &key } }

// ArtifactRun reads another run's artifacts.
func ArtifactRun(runID string) ArtifactOption { return func(o *artifactOptions) { o.run = &runID } }

// ArtifactPublic makes a trusted run's put readable by untrusted runs
// (docs/security/trust.md).
func ArtifactPublic() ArtifactOption { return func(o *artifactOptions) { o.public = true } }

// ArtifactTainted makes a trusted run's get or list read what untrusted runs put.
func ArtifactTainted() ArtifactOption { return func(o *artifactOptions) { o.tainted = true } }

// ArtifactCached lists the project's cached artifacts instead of a run's.
func ArtifactCached() ArtifactOption { return func(o *artifactOptions) { o.cached = true } }

func artifactOpts(opts []ArtifactOption) artifactOptions {
	var o artifactOptions
	for _, f := range opts {
		f(&o)
	}
	return o
}

// artifactConn opens the socket and sends the request line.
func artifactConn(req request) (net.Conn, error) {
	op, _ := req["op"].(string)
	path := os.Getenv("CRYO_SOCKET")
	if path == "" {
		return nil, &ScriptError{"outside_run", op + ": not inside a cryopg run (CRYO_SOCKET is not set)"}
	}
	line, err := encode(req)
	if err != nil {
		return nil, &ScriptError{"not_json", fmt.Sprintf("%s: the request does not encode as JSON: %v", op, err)}
	}
	conn, err := connect(path)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Write(append(line, '\n')); err != nil {
		conn.Close()
		return nil, lostAgent(op, err)
	}
	return conn, nil
}

func lostAgent(op string, err error) error {
	return &AgentUnavailable{fmt.Sprintf("%s: lost the agent connection (%v)", op, err)}
}

func readReply(op string, in *bufio.Reader) (reply, error) {
	raw, err := in.ReadBytes('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, lostAgent(op, err)
	}
	if len(strings.TrimSpace(string(raw))) == 0 {
		return nil, &AgentUnavailable{op + ": the agent closed the connection without a reply"}
	}
	return decodeReply(op, raw)
}

// ArtifactPut stores the file at path as artifact name of this run (or the project's
// cached artifact with ArtifactKey). Not journaled: a replay puts the same bytes again,
// which the store keeps once.
func ArtifactPut(name, path string, opts ...ArtifactOption) (Artifact, error) {
	const op = "artifact.put"
	o := artifactOpts(opts)
	file, err := os.Open(path)
	if err != nil {
		return Artifact{}, &ScriptError{"bad_request", fmt.Sprintf("%s: %v", op, err)}
	}
	defer file.Close()
	info, err := file.Stat()
	if err != nil {
		return Artifact{}, &ScriptError{"bad_request", fmt.Sprintf("%s: %v", op, err)}
	}
	// The x bit is kept: a get makes an executable file executable again.
	conn, err := artifactConn(flag(flag(request{"op": op, "name": name, "key": o.key,
		"size": info.Size()}, "public", o.public), "executable", info.Mode().Perm()&0o100 != 0))
	if err != nil {
		return Artifact{}, err
	}
	defer conn.Close()
	sent, err := io.CopyN(conn, file, info.Size())
	if err != nil {
		if sent < info.Size() && errors.Is(err, io.EOF) {
			return Artifact{}, &ScriptError{"bad_request", fmt.Sprintf("%s: %s shrank while it was sent", op, path)}
		}
		return Artifact{}, lostAgent(op, err)
	}
	r, err := readReply(op, bufio.NewReader(conn))
	if err != nil {
		return Artifact{}, err
	}
	return Artifact{Name: r.str("name"), SHA256: r.str("sha256"), Size: int64(r.int("size")),
		Key: r.str("key")}, nil
}

// ArtifactGet fetches artifact name (this run's, the cached one with ArtifactKey, or
// another run's with ArtifactRun) into path (when empty: the name's last part) and
// returns the path written.
func ArtifactGet(name, path string, opts ...ArtifactOption) (string, error) {
	const op = "artifact.get"
	o := artifactOpts(opts)
	if path == "" {
		path = name[strings.LastIndex(name, "/")+1:]
	}
	conn, err := artifactConn(flag(request{"op": op, "name": name, "key": o.key, "run": o.run},
		"tainted", o.tainted))
	if err != nil {
		return "", err
	}
	defer conn.Close()
	in := bufio.NewReaderSize(conn, 1<<20)
	r, err := readReply(op, in)
	if err != nil {
		return "", err
	}
	size := int64(r.int("size"))
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", &ScriptError{"bad_request", fmt.Sprintf("%s: %v", op, err)}
	}
	tmp, err := os.CreateTemp(dir, ".artifact-")
	if err != nil {
		return "", &ScriptError{"bad_request", fmt.Sprintf("%s: %v", op, err)}
	}
	defer os.Remove(tmp.Name()) // gone by rename once it matched
	digest := sha256.New()
	got, err := io.CopyN(io.MultiWriter(tmp, digest), in, size)
	tmp.Close()
	if got < size {
		return "", &AgentUnavailable{op + ": the artifact download stopped short"}
	}
	if err != nil {
		return "", lostAgent(op, err)
	}
	if hex.EncodeToString(digest.Sum(nil)) != r.str("sha256") {
		return "", &AgentUnavailable{op + ": the artifact's bytes do not match its SHA-256"}
	}
	// A new file's mode (CreateTemp's is 0600) less the umask, with x where r is for an
	// executable artifact.
	perm := os.FileMode(0o666)
	if r.bool("executable") {
		perm = 0o777
	}
	umask := syscall.Umask(0)
	syscall.Umask(umask)
	if err := os.Chmod(tmp.Name(), perm&^os.FileMode(umask)); err != nil {
		return "", &ScriptError{"bad_request", fmt.Sprintf("%s: %v", op, err)}
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", &ScriptError{"bad_request", fmt.Sprintf("%s: %v", op, err)}
	}
	return path, nil
}

// ArtifactList lists this run's artifacts (another run's with ArtifactRun, the project's
// cached ones with ArtifactCached).
func ArtifactList(opts ...ArtifactOption) ([]Artifact, error) {
	o := artifactOpts(opts)
	r, err := call(flag(request{"op": "artifact.list", "run": o.run, "cached": o.cached},
		"tainted", o.tainted))
	if err != nil {
		return nil, err
	}
	var rows []Artifact
	if err := json.Unmarshal(r.value("artifacts"), &rows); err != nil {
		return nil, &AgentUnavailable{"artifact.list: the agent sent a malformed reply"}
	}
	return rows, nil
}
