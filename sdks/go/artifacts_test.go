package cryosleep

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
)

type artifactSeen struct {
	req   map[string]any
	bytes []byte
}

// artifactAgent answers each connection with handle(request, bytes after the line),
// reading the announced size of bytes after an artifact.put line.
func artifactAgent(t *testing.T, handle func(map[string]any, []byte) []byte) (string, *[]artifactSeen) {
	dir := t.TempDir()
	path := filepath.Join(dir, "agent.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := []artifactSeen{}
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			in := bufio.NewReader(conn)
			line, _ := in.ReadBytes('\n')
			var req map[string]any
			_ = json.Unmarshal(line, &req)
			var body []byte
			if req["op"] == "artifact.put" {
				body = make([]byte, int(req["size"].(float64)))
				_, _ = io.ReadFull(in, body)
			}
			mu.Lock()
			seen = append(seen, artifactSeen{req, body})
			mu.Unlock()
			_, _ = conn.Write(handle(req, body))
			conn.Close()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	t.Setenv("CRYO_SOCKET", path)
	return dir, &seen
}

func hexSHA(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

func jsonLine(v any) []byte { b, _ := json.Marshal(v); return append(b, '\n') }

var artData = append(bytes.Repeat([]byte{7}, 3<<20), []byte("end")...)

func TestArtifactPutSendsTheLineThenTheBytes(t *testing.T) {
	dir, seen := artifactAgent(t, func(req map[string]any, body []byte) []byte {
		return jsonLine(map[string]any{"ok": true, "name": req["name"], "sha256": hexSHA(body),
			"size": len(body), "key": req["key"]})
	})
	file := filepath.Join(dir, "data.bin")
	if err := os.WriteFile(file, artData, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := ArtifactPut("dist/data", file, ArtifactKey("lock-1"))
	if err != nil {
		t.Fatal(err)
	}
	want := Artifact{Name: "dist/data", SHA256: hexSHA(artData), Size: int64(len(artData)), Key: "lock-1"}
	if got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	req := (*seen)[0].req
	wantReq := map[string]any{"op": "artifact.put", "name": "dist/data", "key": "lock-1",
		"size": float64(len(artData))}
	if !reflect.DeepEqual(req, wantReq) || !bytes.Equal((*seen)[0].bytes, artData) {
		t.Fatalf("request %v", req)
	}
}

func TestArtifactGetWritesOnlyMatchingBytes(t *testing.T) {
	sent := artData
	dir, seen := artifactAgent(t, func(map[string]any, []byte) []byte {
		head := jsonLine(map[string]any{"ok": true, "size": len(artData), "sha256": hexSHA(artData)})
		return append(head, sent...)
	})
	dest := filepath.Join(dir, "out", "copy.bin")
	if got, err := ArtifactGet("data", dest, ArtifactRun("dev:default:run-1")); err != nil || got != dest {
		t.Fatalf("got %q, %v", got, err)
	}
	if back, _ := os.ReadFile(dest); !bytes.Equal(back, artData) {
		t.Fatal("the copy differs")
	}
	wantReq := map[string]any{"op": "artifact.get", "name": "data", "key": nil, "run": "dev:default:run-1"}
	if !reflect.DeepEqual((*seen)[0].req, wantReq) {
		t.Fatalf("request %v", (*seen)[0].req)
	}
	other := filepath.Join(dir, "other.bin")
	sent = append(append([]byte{}, artData[1:]...), 'x') // same size, other bytes
	var unavailable *AgentUnavailable
	if _, err := ArtifactGet("data", other); !errors.As(err, &unavailable) {
		t.Fatalf("a mismatch gave %v", err)
	}
	sent = artData[10:]
	if _, err := ArtifactGet("data", other); err == nil || !strings.Contains(err.Error(), "stopped short") {
		t.Fatalf("a short download gave %v", err)
	}
	left, _ := filepath.Glob(filepath.Join(dir, "*"))
	for _, p := range left {
		if strings.HasPrefix(filepath.Base(p), ".artifact-") || p == other {
			t.Fatalf("left behind %s", p)
		}
	}
}

func TestArtifactRefusalAndList(t *testing.T) {
	dir, seen := artifactAgent(t, func(req map[string]any, _ []byte) []byte {
		if req["op"] == "artifact.list" {
			return jsonLine(map[string]any{"ok": true, "artifacts": []any{
				map[string]any{"name": "a", "sha256": hexSHA([]byte("a")), "size": 1}}})
		}
		return jsonLine(map[string]any{"ok": false, "error": map[string]any{
			"code": "artifact_quota", "message": "over the bound"}})
	})
	file := filepath.Join(dir, "a")
	_ = os.WriteFile(file, []byte("a"), 0o644)
	var refused *ScriptError
	if _, err := ArtifactPut("a", file); !errors.As(err, &refused) || refused.Code != "artifact_quota" {
		t.Fatalf("got %v", err)
	}
	rows, err := ArtifactList(ArtifactCached())
	if err != nil || len(rows) != 1 || rows[0] != (Artifact{Name: "a", SHA256: hexSHA([]byte("a")), Size: 1}) {
		t.Fatalf("got %v, %v", rows, err)
	}
	want := map[string]any{"op": "artifact.list", "run": nil, "cached": true}
	if !reflect.DeepEqual((*seen)[1].req, want) {
		t.Fatalf("request %v", (*seen)[1].req)
	}
}
