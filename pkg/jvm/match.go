package jvm

import (
	"context"
	"fmt"
	"path"
	"strings"
	"time"
)

// ParseJVMPatterns splits the values of `--jvm` flags (each one pattern or a comma-separated list of them) into
// patterns, dropping empty ones and white space around each, and checks that each is a valid path.Match
// pattern.
func ParseJVMPatterns(values ...string) ([]string, error) {
	var out []string
	for _, v := range values {
		for _, p := range strings.Split(v, ",") {
			if p = strings.TrimSpace(p); p == "" {
				continue
			}
			if _, err := path.Match(p, ""); err != nil {
				return nil, fmt.Errorf("--jvm pattern %q: %w", p, err)
			}
			out = append(out, p)
		}
	}
	return out, nil
}

// MatchJVM reports whether JVM j is selected by patterns, and by which: j matches a pattern when path.Match
// (shell globbing where * and ? do not cross "/") matches it against the JVM's main class (as in JVM.MainClass:
// the class, the jar after -jar, or module/class after -m) or against the last element of it, so that "app.jar"
// and "*.jar" match a JVM started with "-jar /opt/app/app.jar", "/opt/app/*.jar" matches it too, and
// "com.example.*" matches "com.example.Main" and "mymodule/com.example.Main". A JVM whose main class is unknown
// matches nothing. With no patterns every JVM matches. It returns the first pattern that matched.
func MatchJVM(j JVM, patterns []string) (string, bool) {
	if len(patterns) == 0 {
		return "", true
	}
	if j.MainClass == "" {
		return "", false
	}
	names := []string{j.MainClass}
	if base := path.Base(j.MainClass); base != j.MainClass {
		names = append(names, base)
	}
	for _, p := range patterns {
		for _, n := range names {
			if ok, _ := path.Match(p, n); ok {
				return p, true
			}
		}
	}
	return "", false
}

// SelectJVMs returns the JVMs that match patterns (see MatchJVM), in order, and the patterns that matched none
// of jvms.
func SelectJVMs(jvms []JVM, patterns []string) (selected []JVM, unmatched []string) {
	used := map[string]bool{}
	for _, j := range jvms {
		if len(patterns) == 0 {
			selected = append(selected, j)
			continue
		}
		matchedAny := false
		for _, p := range patterns {
			if _, ok := MatchJVM(j, []string{p}); ok {
				used[p] = true
				matchedAny = true
			}
		}
		if matchedAny {
			selected = append(selected, j)
		}
	}
	for _, p := range patterns {
		if !used[p] {
			unmatched = append(unmatched, p)
		}
	}
	return selected, unmatched
}

// WaitForJVMs discovers the JVMs that match patterns (see SelectJVMs). When none does, it polls /proc again,
// with backoff from 50ms to 1s, for up to wait, so that a JVM still starting (whose launcher has not loaded
// libjvm.so yet) is found; with wait 0 it looks once. It returns the matching JVMs, possibly none, and the
// patterns that matched none of the JVMs of the last look; an error only when /proc cannot be read.
func WaitForJVMs(ctx context.Context, wait time.Duration, patterns []string) ([]JVM, []string, error) {
	return WaitForJVMsIn(ctx, nil, wait, patterns)
}

// WaitForJVMsIn is WaitForJVMs limited to the processes of container c (see DiscoverIn); a container none of
// whose processes can be identified is an error with ReasonContainerNotFound at once, not after the wait.
func WaitForJVMsIn(ctx context.Context, c *Container, wait time.Duration, patterns []string) ([]JVM, []string, error) {
	deadline := time.Now().Add(wait)
	delay := waitPollMin
	for {
		jvms, err := DiscoverIn(c)
		if err != nil {
			return nil, nil, err
		}
		selected, unmatched := SelectJVMs(jvms, patterns)
		if len(selected) > 0 || !time.Now().Before(deadline) {
			return selected, unmatched, nil
		}
		if sleepCtx(ctx, min(delay, time.Until(deadline))) != nil {
			return selected, unmatched, nil
		}
		delay = min(delay*2, waitPollMax)
	}
}
