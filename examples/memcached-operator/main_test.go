package main

import (
	"bytes"
	"errors"
	"flag"
	"strings"
	"testing"
)

func TestHelpPrintsTheFlagsAndSucceeds(t *testing.T) {
	var out bytes.Buffer
	err := run(t.Context(), []string{"--help"}, &out)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("run --help: %v, want flag.ErrHelp (which main treats as success)", err)
	}
	for _, want := range []string{"Usage: memcached-operator", "-namespace", "-image", "-metrics-addr", "-leader-elect", "-kubeconfig"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--help output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestUnknownFlagAndStrayArgumentsAreErrors(t *testing.T) {
	for _, args := range [][]string{{"--no-such-flag"}, {"extra"}} {
		var out bytes.Buffer
		if err := run(t.Context(), args, &out); err == nil || errors.Is(err, flag.ErrHelp) {
			t.Errorf("run %v: %v, want an error", args, err)
		}
	}
}
