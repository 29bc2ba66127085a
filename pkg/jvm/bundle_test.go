package jvm

import (
	"archive/tar"
	"bytes"
	"strings"
	"testing"
)

func tarOf(t *testing.T, entries ...tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range entries {
		data := bytes.Repeat([]byte("x"), int(h.Size))
		if h.Typeflag != tar.TypeReg {
			h.Size = 0
			data = nil
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestBundleRoundTrip(t *testing.T) {
	jar, config := []byte("PK\x03\x04 jar bytes"), []byte("rules:\n- pattern: \".*\"\n")
	var buf bytes.Buffer
	if err := WriteBundle(&buf, jar, config); err != nil {
		t.Fatal(err)
	}
	// Padding to a tar record, as tar(1) writes it, is allowed after the end of the archive.
	buf.Write(make([]byte, 10240-buf.Len()%10240))
	b, err := ReadBundle(&buf, true)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b.AgentJar, jar) || !bytes.Equal(b.Config, config) {
		t.Fatalf("read %q %q", b.AgentJar, b.Config)
	}
	buf.Reset()
	if err := WriteBundle(&buf, nil, config); err != nil {
		t.Fatal(err)
	}
	b, err = ReadBundle(&buf, false)
	if err != nil || b.AgentJar != nil || !bytes.Equal(b.Config, config) {
		t.Fatalf("config-only bundle: %+v, %v", b, err)
	}
}

func TestReadBundleRefusesAnythingElse(t *testing.T) {
	reg := func(name string, size int64) tar.Header {
		return tar.Header{Typeflag: tar.TypeReg, Name: name, Size: size, Mode: 0o644}
	}
	var withTrailer bytes.Buffer
	if err := WriteBundle(&withTrailer, []byte("jar"), []byte("")); err != nil {
		t.Fatal(err)
	}
	withTrailer.WriteString("more")
	cases := map[string]struct {
		data    []byte
		withJar bool
		want    string
	}{
		"extra entry":       {tarOf(t, reg("agent.jar", 3), reg("config.yaml", 3), reg("evil.sh", 1)), true, "unexpected entry"},
		"directory":         {tarOf(t, tar.Header{Typeflag: tar.TypeDir, Name: "agent.jar"}, reg("config.yaml", 1)), true, "not a regular file"},
		"symlink":           {tarOf(t, reg("agent.jar", 1), tar.Header{Typeflag: tar.TypeSymlink, Name: "config.yaml", Linkname: "/etc/shadow"}), true, "not a regular file"},
		"duplicate":         {tarOf(t, reg("agent.jar", 1), reg("config.yaml", 1), reg("config.yaml", 1)), true, "twice"},
		"missing jar":       {tarOf(t, reg("config.yaml", 1)), true, "required"},
		"missing config":    {tarOf(t, reg("agent.jar", 1)), true, "required"},
		"jar in config one": {tarOf(t, reg("agent.jar", 1), reg("config.yaml", 1)), false, "unexpected entry"},
		"path":              {tarOf(t, reg("./agent.jar", 1), reg("config.yaml", 1)), true, "unexpected entry"},
		"config too large":  {tarOf(t, reg("agent.jar", 1), reg("config.yaml", MaxBundleConfig+1)), true, "at most"},
		"trailing data":     {withTrailer.Bytes(), true, "after the end"},
		"not tar":           {[]byte(strings.Repeat("garbage!", 200)), true, "not a tar stream"},
		"empty":             {nil, true, "required"},
	}
	for name, c := range cases {
		_, err := ReadBundle(bytes.NewReader(c.data), c.withJar)
		if err == nil || ReasonOf(err) != ReasonBundleInvalid || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v (reason %q), want %s saying %q", name, err, ReasonOf(err), ReasonBundleInvalid, c.want)
		}
	}
	if err := WriteBundle(&bytes.Buffer{}, make([]byte, MaxBundleAgentJar+1), nil); err == nil {
		t.Error("WriteBundle took a jar over the limit")
	}
}
