package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHelpAndBadCommands: --help prints the commands and is no error; no
// command, an unknown one, an argument and a bad platform are errors.
func TestHelpAndBadCommands(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"--help"}, &out, &errOut); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("--help: %v, want flag.ErrHelp", err)
	}
	for _, cmd := range []string{"build", "push", "chart"} {
		if !strings.Contains(out.String(), "\n  "+cmd+" ") {
			t.Errorf("--help does not list %s:\n%s", cmd, out.String())
		}
	}
	for _, args := range [][]string{nil, {"deploy"}, {"build", "extra"}, {"push", "extra"},
		{"build", "-platforms", "windows/amd64", "-agent-jar", "/nonexistent"}} {
		if err := run(context.Background(), args, &out, &errOut); err == nil || errors.Is(err, flag.ErrHelp) {
			t.Errorf("release %q: %v, want an error", args, err)
		}
	}
}

// TestChartCommandPackagesTheChart: `release chart` writes the chart's
// .tgz into -out and prints its path.
func TestChartCommandPackagesTheChart(t *testing.T) {
	dir := t.TempDir()
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"chart", "-out", dir}, &out, &errOut); err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	version, err := os.ReadFile("../../VERSION")
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(dir, "prometheus-jmx-exporter-operator-"+strings.TrimSpace(string(version))+".tgz")
	if strings.TrimSpace(out.String()) != want {
		t.Errorf("printed %q, want %s", out.String(), want)
	}
	if fi, err := os.Stat(want); err != nil || fi.Size() == 0 {
		t.Errorf("%s: %v", want, err)
	}
}
