package cachedir

import (
	"path/filepath"
	"testing"
)

func TestDirUsesXDGCacheHome(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", "/x/cache")
	got, err := Dir("agent", "v1")
	if err != nil {
		t.Fatal(err)
	}
	if want := "/x/cache/handlerkit/agent/v1"; got != want {
		t.Fatalf("Dir = %q, want %q", got, want)
	}
}

func TestDirFallsBackToHome(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", "")
	t.Setenv("HOME", "/h")
	got, err := Dir()
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join("/h", ".cache", "handlerkit"); got != want {
		t.Fatalf("Dir = %q, want %q", got, want)
	}
}

func TestDirFailsWithoutAHome(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", "")
	t.Setenv("HOME", "")
	if got, err := Dir(); err == nil {
		t.Fatalf("Dir = %q with neither XDG_CACHE_HOME nor HOME, want an error", got)
	}
}
