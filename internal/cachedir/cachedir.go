// Package cachedir names the directory where handlerkit's tests and tools keep
// what is slow to make again (built binaries, jars, images):
// ${XDG_CACHE_HOME:-$HOME/.cache}/handlerkit.
package cachedir

import (
	"fmt"
	"os"
	"path/filepath"
)

// Dir returns ${XDG_CACHE_HOME:-$HOME/.cache}/handlerkit joined with elem. It
// creates nothing. It fails only when XDG_CACHE_HOME is unset and the home
// directory is unknown.
func Dir(elem ...string) (string, error) {
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("no cache directory: XDG_CACHE_HOME is unset and %w", err)
		}
		base = filepath.Join(home, ".cache")
	}
	return filepath.Join(append([]string{base, "handlerkit"}, elem...)...), nil
}
