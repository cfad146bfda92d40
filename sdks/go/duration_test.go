package cryosleep

import (
	"testing"
	"time"
)

func TestParseDuration(t *testing.T) {
	good := map[string]time.Duration{
		"10": 10 * time.Second, "1s": time.Second, "500ms": 500 * time.Millisecond,
		"5m": 5 * time.Minute, "1.5h": 90 * time.Minute, "1d": 24 * time.Hour,
	}
	for text, want := range good {
		got, err := ParseDuration(text)
		if err != nil || got != want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", text, got, err, want)
		}
	}
	for _, text := range []string{"1x", "-1s", "", "soon", "1..2s"} {
		if _, err := ParseDuration(text); err == nil {
			t.Errorf("ParseDuration(%q) accepted", text)
		}
	}
}
